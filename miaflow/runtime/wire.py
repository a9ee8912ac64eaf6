"""The messages a job's script and the fork server exchange over their Unix socket.

A message is its length (`LENGTH`) and its bytes; the script's request travels with its
standard streams (file descriptors), the server answers with the forked job's pid (`PID`) and,
at the end, its exit code. A job's named fields travel as JSON (`to_plain`, `from_plain`):
nothing is ever unpickled, and a tuple class is looked up only in the package.
"""

from __future__ import annotations

import importlib
import socket
import struct
from typing import Any

LENGTH = struct.Struct("!Q")  # a message's length, sent before the message
PID = struct.Struct("!q")  # the forked job's pid, the server's first answer
TUPLE = "__tuple__"  # how a job's fields carry a tuple through JSON (`to_plain`)
PACKAGE = "miaflow."


def named(dotted: str) -> Any:
    """The object a dotted name of the package names (`miaflow.jobs.train.train_shard`)."""
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def to_plain(value: Any) -> Any:
    """`value` with each tuple as `{"__tuple__": [its class, its items]}`, so that JSON keeps it
    a tuple: a named tuple of the package (`plan.Experiment`) by its class's dotted name, a plain
    tuple by null."""
    if isinstance(value, tuple):
        kind = type(value)
        name = None if kind is tuple else f"{kind.__module__}.{kind.__qualname__}"
        return {TUPLE: [name, [to_plain(item) for item in value]]}
    if isinstance(value, list):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    return value


def from_plain(value: Any) -> Any:
    """The inverse of `to_plain`; a tuple class is looked up only in the package."""
    if isinstance(value, list):
        return [from_plain(item) for item in value]
    if not isinstance(value, dict):
        return value
    if value.keys() != {TUPLE}:
        return {key: from_plain(item) for key, item in value.items()}
    name, items = value[TUPLE]
    items = [from_plain(item) for item in items]
    if name is None:
        return tuple(items)
    kind = named(name) if name.startswith(PACKAGE) else None
    if not (isinstance(kind, type) and issubclass(kind, tuple)):
        raise ValueError(f"not a tuple class of the package: {name}")
    return kind(*items)


def send_message(connection: socket.socket, payload: bytes, fds: list[int] | None = None) -> None:
    """`payload` with its length first; `fds` (open files) travel with the length."""
    header = LENGTH.pack(len(payload))
    if fds:
        socket.send_fds(connection, [header], fds)
    else:
        connection.sendall(header)
    connection.sendall(payload)


def receive_exactly(connection: socket.socket, size: int) -> bytes:
    """`size` bytes, or fewer if the other side closed the connection first."""
    chunks, left = [], size
    while left and (chunk := connection.recv(left)):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
