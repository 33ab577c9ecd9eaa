"""Offline analysis of intermediate-file I/O logs (native, Spark event logs, Darshan) into reports."""
