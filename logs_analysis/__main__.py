"""``python -m logs_analysis LOGS... --out report.html``: the ``dataplane report`` command."""

from __future__ import annotations

from logs_analysis.cli import report_command

if __name__ == "__main__":
    report_command(prog_name="python -m logs_analysis")
