"""Flags shared by several commands: which system to drive, which checks to run,
where proof results are kept."""

from __future__ import annotations

import argparse
from pathlib import Path

from loopcheck.adapters.loader import SHIPPED, load_factory
from loopcheck.checks.suite import MODES, CheckSet, default_mode
from loopcheck.inputs import writable_dir
from loopcheck.proofs.cache import ProofCache, default_dir
from loopcheck.sut.protocol import SutFactory


def add_adapter(p: argparse.ArgumentParser, default: str | None, default_text: str | None = None) -> None:
    p.add_argument("--adapter", default=default, metavar="NAME|MODULE:FACTORY",
                   help=f"the system under test: {', '.join(SHIPPED)}, or your own factory "
                        f"(a callable Config -> SUT; see sut/protocol.py); default {default_text or default}")


def add_cluster(p: argparse.ArgumentParser, what: str, workers: bool = True) -> None:
    """--cluster, to run `what` as tasks of a Ray cluster (`workers`: as many as
    --workers says, by default the cluster's CPUs)."""
    many = ", --workers of them (default: the cluster's CPUs)" if workers else ""
    p.add_argument("--cluster", metavar="auto|[ray://]HOST:PORT",
                   help=f"run {what} as tasks of a Ray cluster (auto: RAY_ADDRESS or a head running here; "
                        "HOST:PORT: that head's address, this machine one of its nodes; ray://HOST:PORT: its Ray "
                        f"Client server, from outside the cluster){many}; needs the ray extra (docs/cluster.md)")


def add_check_mode(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", choices=MODES, default=None,
                   help="property: checks that need no reference model (any system); lockstep: also "
                        "conformance with the reference model (systems with loopcheck's semantics); "
                        "default: lockstep for those, else property")
    p.add_argument("--ignore", action="append", default=[], metavar="PROPERTY|SIGNATURE,...",
                   help="report no violation of these properties (the names of counterexample files: see "
                        "docs/checking.md), or of these signatures, as a summary prints them (PROPERTY.RULE: one "
                        "rule of a property; crash@FILE:FUNCTION:TYPE:SHAPE or hang@FILE:FUNCTION: a crash or "
                        "hang in one function of the system; a signature cut at a ':' ignores all it begins); "
                        "counted instead, to look past a known bug; repeat it to ignore more")


def factory_of(args: argparse.Namespace) -> SutFactory:
    return load_factory(args.adapter)


def check_set_of(args: argparse.Namespace, semantics: str | None) -> CheckSet:
    """The checks `--check` and `--ignore` select (WorkloadError: an unknown property)."""
    ignore = frozenset(filter(None, (p.strip() for given in args.ignore for p in given.split(","))))
    return CheckSet(args.check or default_mode(semantics), ignore)


def add_proof_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache", metavar="DIR",
                   help="keep each obligation's result here, keyed by what it depends on, and read it back while "
                        "that is unchanged (default $XDG_CACHE_HOME/loopcheck/proofs, else "
                        "~/.cache/loopcheck/proofs; docs/bounds.md)")
    p.add_argument("--no-cache", action="store_true", help="compute every obligation, keeping nothing")


def proof_cache_of(args: argparse.Namespace) -> ProofCache | None:
    """The proof cache --cache and --no-cache select (None: none); WorkloadError
    if --cache names a folder that cannot be made."""
    if args.no_cache:
        return None
    if args.cache:
        writable_dir("--cache", args.cache)
    return ProofCache(Path(args.cache) if args.cache else default_dir())
