"""``deltalog completion bash|zsh|fish|tcsh|powershell``: the shell's completion script, from argcomplete.

The script calls ``deltalog`` back with argcomplete's environment set, and :func:`deltalog.cli.main` answers with
the parser of the command on the line only, so a completion costs what ``deltalog --help`` costs. Install it with
``eval "$(deltalog completion bash)"`` in ``~/.bashrc`` (zsh: ``~/.zshrc``; fish: ``deltalog completion fish |
source``).
"""

from __future__ import annotations

import argparse
import sys

from deltalog.cli import output

SHELLS = ("bash", "zsh", "fish", "tcsh", "powershell")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "completion", help="print the shell completion script (bash, zsh, fish, tcsh, powershell)",
        description="Print the script that completes deltalog's commands and options in SHELL. Install it with "
        "'eval \"$(deltalog completion bash)\"' in ~/.bashrc (zsh: ~/.zshrc; fish: 'deltalog completion fish | "
        "source').",
    )
    p.add_argument("shell", metavar="SHELL", choices=SHELLS, nargs="?", default="bash",
                   help=f"one of {', '.join(SHELLS)} (default: bash)")
    output.add_output_option(p, text="the script", json_help="one object: shell, script")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import argcomplete  # the completion script's generator: imported by this command only

    script = argcomplete.shellcode(["deltalog"], shell=args.shell)
    if output.wants_json(args):
        output.emit({"shell": args.shell, "script": script})
    else:
        sys.stdout.write(script)
    return 0
