"""Offline analysis of intermediate-file I/O logs (native, Spark event logs, Darshan) into reports.

``dataplane report LOGS... --out report.html`` (:mod:`logs_analysis.cli`) or, from Python::

    from logs_analysis import ReportConfig, build_report
    build_report(["logs/"], ReportConfig(budgets=(0.01, 0.05))).write("report.html")

    # only pipeline "merge", files created on 24 November 2026 (UTC), with the CSV too
    config = ReportConfig(pipelines=("merge",), since="2026-11-24", until="2026-11-25")
    build_report(["logs/"], config).write("report.html", csv=True)
"""

from __future__ import annotations

from logs_analysis.errors import (
    AnalysisConfigError,
    AnalysisError,
    DependencyError,
    EmptySelectionError,
    FormatError,
    InputError,
)
from logs_analysis.filters import RowFilter
from logs_analysis.formats import LogFormat
from logs_analysis.issues import ReadIssue, ReadIssues
from logs_analysis.readers import read_table
from logs_analysis.report import Report, ReportConfig, build_report

__all__ = [
    "AnalysisConfigError",
    "AnalysisError",
    "DependencyError",
    "EmptySelectionError",
    "FormatError",
    "InputError",
    "LogFormat",
    "ReadIssue",
    "ReadIssues",
    "Report",
    "ReportConfig",
    "RowFilter",
    "build_report",
    "read_table",
]
