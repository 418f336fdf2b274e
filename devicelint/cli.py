"""The `devicelint` command line: turns options into a run, results into output and an exit code."""

from __future__ import annotations

import difflib
import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from devicelint import __version__
from devicelint.config import (
    OUTPUT_FORMATS,
    Config,
    ConfigError,
    find_config,
    has_devicelint_table,
    load_config,
    with_overrides,
)
from devicelint.exit_codes import EXIT_ERROR


class DefaultToCheck(click.Group):
    """`devicelint src/` means `devicelint check src/`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            first = args[0]
            if not first.startswith("-") and not os.path.lexists(first):
                # `devicelint rul DL101`: a mistyped command, not a path to lint.
                close = difflib.get_close_matches(first, list(self.commands), n=1, cutoff=0.6)
                if close:
                    fail(f"unknown command {first!r} (and no such file); did you mean `devicelint {close[0]}`?")
            args = ["check", *args]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultToCheck, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="devicelint")
def cli() -> None:
    """Find PyTorch device bugs before they cost a GPU hour.

    `devicelint PATH...` is short for `devicelint check PATH...`.
    """


def fail(message: str) -> None:
    click.echo(f"devicelint: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _settings(options: dict[str, Any]) -> Config:
    """The config file's settings with the command line's overrides on top."""
    given = options.pop("config_file")
    isolated = options.pop("isolated")
    overrides = [c for c in given if "=" in c and not Path(c).exists()]
    files = [c for c in given if c not in overrides]
    if len(files) > 1:
        fail("--config names more than one config file")
    for pattern in options.pop("per_file_ignores"):
        glob, _, codes = pattern.rpartition(":")
        if not glob or not codes:
            fail(f"--per-file-ignores {pattern!r}: expected GLOB:CODES, e.g. 'tests/*:DL501'")
        overrides.append(f"per-file-ignores = {{ {json.dumps(glob)} = {json.dumps(codes.split(','))} }}")
    extend_exclude = options.pop("extend_exclude")
    if extend_exclude:
        overrides.append(f"extend-exclude = {json.dumps(list(extend_exclude))}")
    torch_version = options.pop("torch_version")
    if torch_version:
        overrides.append(f"torch-version = {json.dumps(torch_version)}")
    settings = _load_settings(files[0] if files else None, isolated)
    # Without a named config, each file takes the nearest config above it (as Ruff), with the
    # same overrides on top.
    options["nested_configs"] = None if (files or isolated) else overrides
    try:
        return with_overrides(settings, overrides)
    except ConfigError as err:
        fail(str(err))
        raise AssertionError from err  # unreachable: fail() exits


def _load_settings(config_file: str | None, isolated: bool) -> Config:
    try:
        if isolated:
            return Config()
        if config_file:
            return load_config(Path(config_file))
        found = find_config(Path.cwd())
        if (
            found is not None
            and found.name == "devicelint.toml"
            and has_devicelint_table(found.with_name("pyproject.toml"))
        ):
            click.echo(
                f"devicelint: warning: {found} and [tool.devicelint] in {found.with_name('pyproject.toml')} "
                f"both configure devicelint; {found.name} wins and the table is ignored",
                err=True,
            )
        return load_config(found) if found else Config()
    except ConfigError as err:
        fail(str(err))
        raise AssertionError from err  # unreachable: fail() exits


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(readable=False))
@click.option(
    "--select", multiple=True, help="Rules to enable instead of the defaults: codes, prefixes (DL1), names, or ALL."
)
@click.option("--extend-select", multiple=True, help="Rules to enable on top of the selection.")
@click.option("--ignore", multiple=True, help="Rules to disable.")
@click.option(
    "--output-format",
    type=click.Choice(OUTPUT_FORMATS),
    help="Output format (default: text, or `output-format` in config).",
)
@click.option(
    "-o", "--output-file", type=click.Path(dir_okay=False, writable=True), help="Write the report to this file."
)
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option(
    "--config",
    "config_file",
    multiple=True,
    help="A config file to use instead of searching for one, or a KEY=VALUE override in TOML syntax (repeatable).",
)
@click.option(
    "--per-file-ignores",
    "per_file_ignores",
    multiple=True,
    metavar="GLOB:CODES",
    help="Rules to ignore in files matching GLOB, e.g. 'tests/*:DL501,DL502' (repeatable; added to the config's).",
)
@click.option(
    "--extend-exclude", "extend_exclude", multiple=True, metavar="GLOB", help="More paths to exclude (repeatable)."
)
@click.option(
    "--torch-version",
    "torch_version",
    metavar="VERSION",
    help="The project's torch version (as `torch-version` in config).",
)
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option(
    "--force-exclude", is_flag=True, help="Apply excludes to paths named on the command line too (pre-commit)."
)
@click.option("--stdin-filename", help="The name to report for source read from stdin (`-`).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: all cores).")
@click.option(
    "--color",
    "color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    help="Colour text output: auto (a terminal, unless NO_COLOR is set or FORCE_COLOR asks for it), always, never.",
)
@click.option(
    "--show-source/--no-show-source", default=True, help="Show the offending line under each finding (text output)."
)
@click.option("--statistics", is_flag=True, help="Show how many findings each rule produced.")
@click.option("--fix", is_flag=True, help="Apply safe fixes.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff, apply unsafe fixes as well.")
@click.option("--diff", is_flag=True, help="Show the fixes as a diff instead of writing them.")
@click.option(
    "--show-fixes", is_flag=True, help="List the fixes applied (with --diff: that would be) per file and rule."
)
@click.option(
    "--add-noqa",
    is_flag=True,
    help="Add `# noqa: CODE` to every line with a finding (adopting devicelint on old code), and exit.",
)
@click.option(
    "--fix-only",
    is_flag=True,
    help="Apply safe fixes (implies --fix) and report only what was fixed, not what remains.",
)
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit 1 when any fix was applied, even if nothing remains.")
@click.option("--show-files", is_flag=True, help="List the files that would be linted, and exit.")
@click.option(
    "--no-project",
    is_flag=True,
    help="Lint each file on its own: no facts from the other modules of its project.",
)
@click.option(
    "--show-project",
    is_flag=True,
    help="Show each project's root and the files its index summarised for the files named, and exit.",
)
@click.option("--show-settings", is_flag=True, help="Show the resolved settings and the file they came from, and exit.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Cache folder (default: .devicelint_cache).")
@click.option("-q", "--quiet", is_flag=True, help="Print findings only: no summary or progress.")
def check(paths: tuple[str, ...], **options: Any) -> None:
    """Lint files and folders (default: the current folder)."""
    from devicelint.check_command import run_check

    settings = _settings(options)
    code = run_check(list(paths) or ["."], settings, options)
    from devicelint.runner import abandoned_work

    if abandoned_work():  # a file given up at the time limit is still being parsed in a thread
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


@cli.command("rules")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text")
def rules_command(output_format: str) -> None:
    """List every rule: code, name, default, summary."""
    import json

    from devicelint.registry import FIX_LABELS, rule_infos

    rules = rule_infos()
    if output_format == "json":
        click.echo(
            json.dumps(
                [
                    {
                        "code": r.code,
                        "name": r.name,
                        "default": r.default_enabled,
                        "severity": r.severity,
                        "fix": r.fix_availability,
                        "summary": r.summary,
                    }
                    for r in rules
                ],
                indent=2,
            )
        )
        return
    width = max(len(r.name) for r in rules)
    click.echo(f"{'CODE':<6}  {'NAME':<{width}}  {'DEFAULT':<7}  {'FIX':<11}  SUMMARY")
    for r in rules:
        fix = FIX_LABELS[r.fix_availability]
        click.echo(f"{r.code:<6}  {r.name:<{width}}  {'on' if r.default_enabled else 'off':<7}  {fix:<11}  {r.summary}")
    with_fix = [r for r in rules if r.fix_availability != "none"]
    click.echo(
        f"\n{len(with_fix)} of {len(rules)} rules offer a fix: `--fix` applies safe ones, `--unsafe-fixes` the rest."
    )


@cli.command("rule")
@click.argument("code_or_name")
def rule_command(code_or_name: str) -> None:
    """Print one rule's full reference."""
    from devicelint.docs import rule_page
    from devicelint.registry import find_rule

    rule = find_rule(code_or_name)
    if rule is None:
        fail(f"unknown rule {code_or_name!r}; `devicelint rules` lists them")
        return
    click.echo(rule_page(rule), nl=False)


@cli.command("server")
def server_command() -> None:
    """Start the language server (LSP over stdin and stdout) for editors."""
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError as err:
        fail(
            f"the language server needs pygls and lsprotocol ({err.name} is missing): "
            "install devicelint[server], e.g. `pip install 'devicelint[server]'`"
        )
    from devicelint.server.handlers import run_stdio

    run_stdio()


@cli.command("clean")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Cache folder (default: .devicelint_cache).")
def clean_command(cache_dir: str | None) -> None:
    """Delete the cache folder."""
    from devicelint.cache import DEFAULT_CACHE_DIR, remove_cache

    target = Path(cache_dir or DEFAULT_CACHE_DIR)
    removed = remove_cache(target)
    click.echo(f"Removed {target}" if removed else f"No cache at {target}")


def main() -> None:
    cli(prog_name="devicelint")
