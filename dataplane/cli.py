"""The ``dataplane`` command.

Sub-commands live in the package that owns them and are found through the
``dataplane.commands`` entry-point group (see ``pyproject.toml``), so running
``dataplane cache info`` imports the cache room and nothing else. Each entry
point names a :class:`click.Command` (or :class:`click.Group`).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

import click

ENTRY_POINT_GROUP = "dataplane.commands"

#: One line per command of :data:`ENTRY_POINT_GROUP`, shown by ``dataplane --help``
#: without importing the command's package: each is the command's own short help
#: (the first sentence of its docstring; ``tests/dataplane/test_cli.py`` checks that
#: they agree). A command missing here is imported to list it.
COMMAND_SUMMARIES: dict[str, str] = {
    "cache": "Inspect, verify, clear and build augmented-sample caches.",
    "compare": "Plot validation accuracy against wall time for RUN_DIRS, one line per run.",
    "doctor": "Measure the input stage against the compute stage and recommend a cache.",
    "ingest": "Write DATASET (fmnist: Debian's Fashion-MNIST IDX files) to OUT/train and "
    "OUT/test.",
    "iterate": "Iterate DATA (image folder or Parquet) and print images/s per epoch and peak "
    "RSS.",
    "placement": "Learned SSD/HDD placement of intermediate files: collect I/O logs, train, "
    "evaluate, simulate, compact logs.",
    "report": "Analyse intermediate-data I/O logs and write a self-contained HTML report.",
    "serve": "Run the placement service on an embedded LocalCluster (or, with --demo, show it "
    "at work).",
    "train": "Train a model with a schedule (fresh | perfect | torch) and write "
    "RUN_DIR/run.json.",
}


def _command_entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


class _LazyGroup(click.Group):
    """A click group whose sub-commands are imported only when invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_command_entry_points()))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the commands with their short help, as :class:`click.Group` does, but
        from :data:`COMMAND_SUMMARIES`: listing must not import every room."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            summary = COMMAND_SUMMARIES.get(name)
            if summary is not None and name not in self.commands:
                # Shortened exactly as click shortens the command's own help.
                rows.append((name, click.Command(name, help=summary).get_short_help_str(limit)))
                continue
            try:
                command = self.get_command(ctx, name)
            except click.ClickException as exc:  # listed, with why it cannot run
                rows.append((name, f"({exc.message})"))
                continue
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        ep = _command_entry_points().get(cmd_name)
        if ep is None:
            return None
        try:
            loaded = ep.load()
        except ImportError as exc:
            raise click.ClickException(
                f"the '{cmd_name}' command could not be imported ({exc}); "
                "reinstall the project with `pip install -e .[test]` or `make demo`"
            ) from exc
        if not isinstance(loaded, click.Command):
            raise click.ClickException(
                f"entry point {ep.value!r} for '{cmd_name}' is not a click command"
            )
        return loaded


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dataplane")
def main() -> None:
    """dataplane: a DALI data loader with an augmented-sample cache, and learned
    SSD/HDD placement of intermediate files."""


if __name__ == "__main__":  # pragma: no cover
    main()
