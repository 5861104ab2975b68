"""Continuing an incomplete run (`oink-bench ... --resume DIR`).

A machine lent by the call (the H200 here runs commands of at most 10 minutes) can stop the whole
matrix before its end; a run stopped that way (SIGTERM, `timeout`) or cut off after a part
(SIGKILL: results.json is written after every part) keeps the parts it finished. `--resume`
measures the other parts with the same options, on the same GPU and torch, and writes the whole
run into the same folder: one report, the first call's date and command at its head, each later
call named beside it with the parts it measured and its own copy ceiling (each record's % of the
ceiling is against the ceiling of the call that measured it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# What must match between the calls of one run: the measurement's options and where it ran.
SAME_CONFIG = ("parts", "ops", "quick", "device", "eps", "max_sets", "matrix")
SAME_ENV = ("device_kind", "gpu", "sm_count", "torch", "cuda_runtime")


@dataclass
class Resumed:
    env: dict  # the first call's, with every later call listed under "resumed"
    ceiling: dict  # the first call's copy ceiling
    records: list[dict]  # the finished parts' records, as measured
    done: list[list[str]]  # [suite, variant] of every finished part, in order


def part_key(part) -> list[str]:
    return [part.suite, part.variant.name]


def load(out_dir: Path, config: dict, env: dict, found: dict) -> Resumed:
    """The finished parts of the incomplete run in out_dir; ValueError (naming what differs)
    when there is none to continue, or when this call would not measure the same run: other
    options, another GPU or torch, or other peers (found: peer -> version, or why it is not
    measured)."""
    path = out_dir / "results.json"
    if not path.is_file():
        raise ValueError(f"--resume {out_dir}: no results.json there")
    doc = json.loads(path.read_text())
    first = doc.get("env", {}).get("command", "?")
    if doc.get("status") == "complete":
        raise ValueError(f"--resume {out_dir}: that run is complete; nothing to resume")
    if "parts_done" not in doc:
        raise ValueError(
            f"--resume {out_dir}: its results.json does not say which parts it finished "
            "(written by an oink-bench without --resume)"
        )
    for key in SAME_CONFIG:
        if doc["config"].get(key) != config.get(key):
            raise ValueError(
                f"--resume {out_dir}: that run measured with {key} = {doc['config'].get(key)!r}, "
                f"this call with {config.get(key)!r}; give the options of its command: `{first}`"
            )
    for key in SAME_ENV:
        if doc["env"].get(key) != env.get(key):
            raise ValueError(
                f"--resume {out_dir}: that run measured on {key} {doc['env'].get(key)!r}, this "
                f"call runs on {env.get(key)!r}: one run is measured in one environment"
            )
    for peer in sorted(set(found) | set(doc.get("providers_found", {}))):
        before, now = doc.get("providers_found", {}).get(peer), found.get(peer)
        if before != now:
            raise ValueError(
                f"--resume {out_dir}: that run had the peer {peer} as {before!r}, this call has "
                f"{now!r}: one run measures the same peers throughout"
            )
    done = [list(k) for k in doc["parts_done"]]
    keep = {tuple(k) for k in done}
    records = [r for r in doc["results"] if (r["suite"], r["variant"]) in keep]
    previous = {**doc["env"], "resumed": list(doc["env"].get("resumed", []))}
    return Resumed(previous, doc["copy_ceiling"], records, done)


def record_call(resumed: Resumed, env: dict, ceiling: dict, parts: list) -> dict:
    """The run's env: the first call's, with this call appended under "resumed"."""
    this = {
        "date_utc": env["date_utc"],
        "command": env["command"],
        "oink_revision": env["oink_revision"],
        "copy_ceiling_GBps": ceiling["GBps"],
        "parts": [part_key(p) for p in parts],
    }
    return {**resumed.env, "resumed": [*resumed.env["resumed"], this]}
