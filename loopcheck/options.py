"""Flags shared by several commands: which system to drive and which checks to run."""

from __future__ import annotations

import argparse

from checks.suite import MODES
from sut.loader import SHIPPED, load_factory
from sut.protocol import SutFactory


def add_adapter(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--adapter", default=default, metavar="NAME|MODULE:FACTORY",
                   help=f"the system under test: {', '.join(SHIPPED)}, or your own factory "
                        f"(a callable Config -> SUT; see sut/protocol.py); default {default}")


def add_check_mode(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", choices=MODES, default=None,
                   help="property: checks that need no reference model (any system); lockstep: also "
                        "conformance with the reference model (systems with loopcheck's semantics); "
                        "default: lockstep for those, else property")


def factory_of(args: argparse.Namespace) -> SutFactory:
    return load_factory(args.adapter)


def check_mode_of(args: argparse.Namespace, semantics: str | None) -> str:
    return args.check or ("lockstep" if semantics == "loopcheck" else "property")
