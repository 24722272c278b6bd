"""Flags that name places to write, checked before any work starts, so that a bad
one is one error line (exit 2) instead of a failure after a long run."""

from __future__ import annotations

import argparse
from pathlib import Path

from loopcheck.model.errors import WorkloadError


def writable_dir(flag: str, path: str) -> None:
    """The folder exists or can be made, and is a folder."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise WorkloadError(f"{flag}: {path!r} exists and is not a folder")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkloadError(f"{flag}: cannot create folder {path!r} ({exc.strerror})") from exc


def writable_file(flag: str, path: str, suffix: str | None = None) -> None:
    """The file's folder exists, the path is not a folder, and it has the suffix."""
    target = Path(path)
    if suffix and target.suffix.lower() != suffix:
        raise WorkloadError(f"{flag}: must name a {suffix} file, got {path!r}")
    if target.is_dir():
        raise WorkloadError(f"{flag}: {path!r} is a folder")
    if not target.parent.is_dir():
        raise WorkloadError(f"{flag}: folder {str(target.parent)!r} does not exist")


def reachable_redis(url: str) -> None:
    """A redis:// URL that parses and answers a ping within two seconds."""
    try:
        import redis
    except ImportError as exc:
        raise WorkloadError("--db: a Redis database needs the 'redis' package (pip install redis)") from exc
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except (ValueError, redis.RedisError) as exc:
        raise WorkloadError(f"--db: cannot use {url!r}: {exc}") from exc


def check_places(args: argparse.Namespace) -> None:
    """Every place-naming flag a command has, checked."""
    if getattr(args, "out", None):
        writable_dir("--out", args.out)
    db = getattr(args, "db", None)
    if db:
        if db.startswith("redis://"):
            reachable_redis(db)
        else:
            writable_dir("--db", db)
    if getattr(args, "junit", None):
        writable_file("--junit", args.junit)
    if getattr(args, "plot", None):
        writable_file("--plot", args.plot, ".png")
