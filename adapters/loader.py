"""Resolving `--adapter`: a shipped name or `module:factory` (a module on the
path, or a .py file), and what a factory's systems support."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from loopcheck.driver.driver import within
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.runctl.stop import Deadline, OutOfTime
from loopcheck.sut.protocol import Capabilities, ProtocolError, SutFactory, check_sut

SHIPPED = {"model": "loopcheck.sut.model_sut:ModelSUT", "torch": "loopcheck.adapters.torch_sut:TorchSUT",
           "vllm": "loopcheck.adapters.vllm_sut:VllmSUT", "lmdeploy": "loopcheck.adapters.lmdeploy_sut:LmdeploySUT",
           "sglang": "loopcheck.adapters.sglang_sut:SglangSUT"}


# modules of earlier releases -> where they are now: a spec naming one still loads, with a warning
MOVED = {f"loopcheck.sut.{name}": f"loopcheck.adapters.{name}"
         for name in ("torch_sut", "vllm_sut", "sglang_sut", "lmdeploy_sut")}


def load_factory(spec: str) -> SutFactory:
    """The factory named by `spec` ("model", "torch", "vllm", "lmdeploy", "sglang", "pkg.mod:name" or
    "path/file.py:name"); WorkloadError naming --adapter if it cannot be loaded."""
    target = SHIPPED.get(spec, spec)
    module_name, sep, attr = target.rpartition(":")
    if module_name in MOVED:
        print(f"loopcheck: warning: --adapter {spec}: {module_name} moved to {MOVED[module_name]}; "
              "the old name goes in the next release", file=sys.stderr)
        module_name = MOVED[module_name]
    if not sep or not module_name or not attr:
        raise WorkloadError(f"--adapter: expected one of {', '.join(SHIPPED)} or MODULE:FACTORY, got {spec!r}")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise WorkloadError(f"--adapter: no such file {module_name!r}")
            loaded = importlib.util.spec_from_file_location(path.stem, path)
            assert loaded is not None and loaded.loader is not None
            module = importlib.util.module_from_spec(loaded)
            sys.modules[path.stem] = module   # so that classes defined there can find their module
            loaded.loader.exec_module(module)
        else:
            if "" not in sys.path:
                sys.path.insert(0, "")
            module = importlib.import_module(module_name)
    except WorkloadError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to import the user's module is bad input
        raise WorkloadError(f"--adapter: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise WorkloadError(f"--adapter: {module_name!r} has no callable {attr!r}")
    return factory


def capabilities_of(factory: SutFactory, cfg: Config | None = None, deadline: Deadline | None = None
                    ) -> Capabilities:
    """The capabilities of a system the factory builds (on `cfg`, default Config());
    WorkloadError if the factory refuses that config (saying, for the default,
    that loopcheck builds the system on it once to read what it supports),
    ProtocolError if it builds something that is not a SUT, OutOfTime if
    `deadline` passes while it is being built."""
    try:
        sut: Any = within(deadline, lambda: factory(cfg or Config()))
    except WorkloadError as exc:
        if cfg is not None:
            raise
        raise WorkloadError(f"the system refuses the default config, on which loopcheck builds it once to read "
                            f"its capabilities: {exc}") from exc
    except OutOfTime:
        raise
    except Exception as exc:  # noqa: BLE001
        raise ProtocolError("factory(config) builds a system", f"{type(exc).__name__}: {exc}") from exc
    return check_sut(sut).capabilities


def warn_costly(factory: SutFactory, configs: Iterable[Config]) -> None:
    """Before a run: one warning line on stderr for each config whose steps the
    factory says may run long (its optional `costly(cfg) -> str | None`, part
    of the adapter contract: docs/checking.md), once per distinct reason."""
    costly = getattr(factory, "costly", None)
    if costly is None:
        return
    said: set[str] = set()
    for cfg in configs:
        why = costly(cfg)
        if why and why not in said:
            said.add(why)
            print(f"loopcheck: warning: {why}", file=sys.stderr)
