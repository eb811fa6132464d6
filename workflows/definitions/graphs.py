"""Cycles in a graph of names (steps' dependsOn, templates' waitFor, profiles' dependsOn)."""

from __future__ import annotations


def cycle(graph: dict[str, list[str]]) -> list[str]:
    """The first cycle of `graph` (node -> the nodes it waits for), walking the nodes in
    order, as a path; [] if none.

    Edges to nodes outside `graph` are ignored (callers report unknown names themselves).
    """
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str]:
        path.append(node)
        for dep in graph[node]:
            if dep not in graph:
                continue
            if dep in path:
                return [*path[path.index(dep) :], dep]
            if dep not in done and (found := visit(dep)):
                return found
        path.pop()
        done.add(node)
        return []

    for node in graph:
        if node not in done and (found := visit(node)):
            return found
    return []
