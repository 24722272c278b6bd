"""`loopcheck` entry point: parses arguments and dispatches to one command module.

Exit codes shared by every command: 0 the check passed, 1 it found a problem
(a liveness failure, a counterexample, a failed obligation), 2 bad input, 130
interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
from collections.abc import Callable, Sequence

from loopcheck.inputs import check_places
from loopcheck.model.errors import WorkloadError
from loopcheck.report import LAST_REPRODUCE
from loopcheck.runctl.stop import StopRequest, Terminated, exit_code
from loopcheck.sut.protocol import ProtocolError

Command = Callable[[argparse.Namespace], int]
EXIT_CODES = ("exit codes: 0 the check passed; 1 it found a problem (a counterexample, a liveness failure, a "
              "failed obligation, an incomplete exploration); 2 bad input (one error line); 130 Ctrl-C; 143 SIGTERM")


def _parser() -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    from loopcheck import commands

    parser = argparse.ArgumentParser(
        prog="loopcheck", epilog=EXIT_CODES,
        description="Verify LLM-serving schedulers: prove the reference policy, explore it, fuzz any scheduler "
                    "behind the SUT protocol (sut/protocol.py) and replay what was found.")
    sub = parser.add_subparsers(dest="command", required=True)
    handlers: dict[str, Command] = {}
    for name, (register, handler) in commands.REGISTRY.items():
        summary = " ".join(handler.__doc__.split("\n\n")[0].split())   # the docstring's first paragraph
        register(sub.add_parser(name, help=summary, description=summary, epilog=EXIT_CODES))
        handlers[name] = handler
    return parser, handlers


def help_texts(width: int = 100) -> dict[str, str]:
    """What `loopcheck --help` and `loopcheck COMMAND --help` print, at a fixed
    width (not the terminal's), keyed "loopcheck" and "loopcheck COMMAND": the
    source of docs/commands.md's usage blocks."""
    parser, _ = _parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    texts = {}
    for name, command in [("loopcheck", parser), *((f"loopcheck {n}", p) for n, p in sub.choices.items())]:
        command.formatter_class = functools.partial(argparse.HelpFormatter, width=width)
        texts[name] = command.format_help()
    return texts


def _stop(signum: int, frame: object) -> None:
    StopRequest.request(Terminated() if signum == signal.SIGTERM else KeyboardInterrupt())


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = _parser()
    args = parser.parse_args(argv)
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        check_places(args)
        return handlers[args.command](args)
    except (WorkloadError, ProtocolError) as exc:
        print(f"loopcheck {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        code = exit_code(exc)
        print(f"loopcheck {args.command}: interrupted ({'SIGTERM' if code == 143 else 'SIGINT'}); "
              "files written so far are kept", file=sys.stderr)
        if LAST_REPRODUCE:
            print(LAST_REPRODUCE[0], file=sys.stderr)
        return code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        StopRequest.clear()


if __name__ == "__main__":
    sys.exit(main())
