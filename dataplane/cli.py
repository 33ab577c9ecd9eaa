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


def _command_entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


class _LazyGroup(click.Group):
    """A click group whose sub-commands are imported only when invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_command_entry_points()))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing must not import every room: show where each command lives instead.
        rows = [
            (name, f"(from {ep.module})") for name, ep in sorted(_command_entry_points().items())
        ]
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
