"""Graph facts: what a run's optimized Dask task graphs say about its stages.

:func:`graph_facts` counts the distinct tasks of each stage (:func:`dask.utils.key_split`)
in the graphs of a run and names each P2P shuffle ``<operator>-p2p<i>`` in graph order,
so a pipeline names its shuffles the same way in every run. :class:`StageKeys` keeps the
task keys counted so far, so that a later phase of a run (queries on a persisted
collection) adds to the facts of an earlier one. The drivers (:mod:`placement.collect`,
:mod:`placement.service.demo`) send these facts to the workers in a
:class:`~placement.storage.RunContext`, which fills in each file's stage fields.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GraphFacts:
    """What the driver learns from a run's optimized task graphs."""

    stage_tasks: dict[str, int]
    shuffle_stages: dict[str, str]
    shuffle_inputs: dict[str, int]


_BARRIER = "shuffle-barrier-"


@dataclass
class StageKeys:
    """The task keys of each stage (:func:`dask.utils.key_split`) in a run's graphs so far.

    ``tasks`` holds the keys of tasks that compute or hold data (persisted data are
    futures), ``aliases`` those of tasks that only give another task's output a new name
    (``dask._task_spec.Alias``: a persisted collection's own keys, a layer's output name).
    """

    tasks: dict[str, set[Any]] = field(default_factory=dict)
    aliases: dict[str, set[Any]] = field(default_factory=dict)

    def add(self, key: Any, alias: bool) -> bool:
        """Record ``key``; ``False`` if it was already recorded (as the same kind)."""
        from dask.utils import key_split

        stage = key_split(key)
        keys = (self.aliases if alias else self.tasks).setdefault(stage, set())
        if key in keys:
            return False
        keys.add(key)
        return True

    def counts(self) -> dict[str, int]:
        """Tasks of each stage: its computing tasks, or its aliases if it has no other."""
        return {
            stage: len(self.tasks.get(stage, ())) or len(self.aliases.get(stage, ()))
            for stage in {**self.tasks, **self.aliases}
        }


def _is_alias(task: Any) -> bool:
    try:
        from dask._task_spec import Alias
    except ImportError:  # a Dask without task-spec aliases
        return False
    return isinstance(task, Alias)


def graph_facts(
    collections: Iterable[Any],
    operator: str,
    *,
    first: int = 0,
    seen: StageKeys | None = None,
) -> GraphFacts:
    """Count tasks per stage and name each P2P shuffle of ``collections``' optimized graphs.

    A task key is counted once however many graphs hold it: queries reading one persisted
    collection all hold its keys, and its stage has as many tasks as it has partitions.
    Aliases (tasks that only rename another task's output) count only for a stage that
    has no other task, so a stage is not counted twice for the name its output gets.
    Shuffles are named ``<operator>-p2p<i>`` in graph order starting at ``first``, so the
    same pipeline names its shuffles the same way in every run.

    Parameters
    ----------
    collections : iterable of Dask collections
        The graphs of one phase of a run (a persisted collection, or the queries on it).
    operator : str
        Operator kind of the run, the prefix of the shuffle names.
    first : int
        Index of the first shuffle named here (the number named by earlier calls).
    seen : StageKeys, optional
        Task keys counted by earlier calls for the same run; updated in place. Keys
        already in it are not counted again (nor their shuffles renamed), and
        ``stage_tasks`` then covers the stages of the earlier calls too: the later
        phase's facts add to the earlier ones instead of replacing them.

    Returns
    -------
    GraphFacts
        Distinct tasks per stage (with ``seen``: over every call of the run), and the
        names and input partitions of the shuffles first seen here.
    """
    from dask.base import collections_to_expr

    stage_keys = StageKeys() if seen is None else seen
    barriers: list[tuple[int, int, str]] = []
    transfers: Counter[str] = Counter()
    for gi, coll in enumerate(collections):
        graph = dict(collections_to_expr([coll], True).optimize().__dask_graph__())
        for position, (key, task) in enumerate(graph.items()):
            if not stage_keys.add(key, _is_alias(task)):
                continue
            name = key[0] if isinstance(key, tuple) else key
            if not isinstance(name, str):
                continue
            if name.startswith(_BARRIER):
                # graphs of the same pipeline list their layers in the same order
                barriers.append((gi, position, name[len(_BARRIER) :]))
            elif "transfer-" in name:
                transfers[name.rsplit("-", 1)[-1]] += 1
    shuffle_stages = {
        sid: f"{operator}-p2p{i}" for i, (_, _, sid) in enumerate(sorted(barriers), first)
    }
    shuffle_inputs = {sid: transfers[sid] for sid in shuffle_stages if transfers[sid]}
    return GraphFacts(stage_keys.counts(), shuffle_stages, shuffle_inputs)


__all__ = ["GraphFacts", "StageKeys", "graph_facts"]
