"""`modelforge operators add|list|remove`: named operator keys in the operators file
(`--file`, else MODELFORGE_OPERATORS_FILE; the embedded stack's is `$MODELFORGE_HOME/operators`).
The file holds only digests: a key is printed once, when it is made."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from gateway.admin.tables import table
from gateway.operators import OPERATORS_FILE_ENV, add_operator, parse_operators, remove_operator


def _file(args: argparse.Namespace) -> Path:
    path = args.file or os.environ.get(OPERATORS_FILE_ENV, "")
    if not path:
        raise SystemExit(f"modelforge operators: --file (or {OPERATORS_FILE_ENV}) is required")
    return Path(path)


def _cmd_add(args: argparse.Namespace) -> int:
    path = _file(args)
    try:
        key = add_operator(path, args.name)
    except ValueError as error:
        raise SystemExit(f"modelforge operators add: {error}") from None
    print(f"operator {args.name}: key {key}")
    print("(shown once; the gateways reading the file accept it at once)")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    path = _file(args)
    try:
        names = sorted(parse_operators(path.read_text())) if path.exists() else []
    except ValueError as error:
        raise SystemExit(f"modelforge operators list: {path}: {error}") from None
    if args.json:
        print(json.dumps(names))
    else:
        print(table([{"name": name} for name in names], [("OPERATOR", lambda row: row["name"])]))
    return 0


def _cmd_remove(args: argparse.Namespace) -> int:
    try:
        remove_operator(_file(args), args.name)
    except ValueError as error:
        raise SystemExit(f"modelforge operators remove: {error}") from None
    print(f"operator {args.name} removed: its key no longer authenticates")
    return 0


def register(subparsers: Any) -> None:
    operators = subparsers.add_parser(
        "operators", help="named operator keys for the admin API (who approved is who held the key)"
    ).add_subparsers(dest="operators_command", required=True)
    for verb, handler, summary in (
        ("add", _cmd_add, "make a key for a new operator (printed once)"),
        ("list", _cmd_list, "the operators' names"),
        ("remove", _cmd_remove, "drop an operator: its key stops working"),
    ):
        command = operators.add_parser(verb, help=summary)
        if verb != "list":
            command.add_argument("name")
        else:
            command.add_argument("--json", action="store_true", help="the names as a JSON list")
        command.add_argument("--file", help=f"the operators file (default: {OPERATORS_FILE_ENV})")
        command.set_defaults(handler=handler)
