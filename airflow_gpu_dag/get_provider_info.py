"""Provider metadata for Airflow's ``apache_airflow_provider`` entry point."""

from __future__ import annotations

import copy
from typing import Any

from airflow_gpu_dag.hooks.connection_types import CONNECTION_TYPES
from airflow_gpu_dag.version import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-gpu-dag",
        "name": "GPU DAG",
        "description": "Dependency-graph-driven GPU scheduling: critical-path priority, GPU watermark "
        "pools, reservation for wide critical tasks.",
        # newest first: this one, then the released ones
        "versions": [__version__, "0.1.0"],
        "hooks": [{"integration-name": "GPU DAG", "python-modules": ["airflow_gpu_dag.hooks.airflow_api"]}],
        # The gpu_dag_api connection (docs/connections.md): type, hook, form fields and UI behaviour.
        "connection-types": copy.deepcopy(list(CONNECTION_TYPES)),
        "operators": [
            {
                "integration-name": "GPU DAG",
                "python-modules": [
                    "airflow_gpu_dag.operators.gpu",
                    "airflow_gpu_dag.operators.kubernetes",
                    "airflow_gpu_dag.operators.fallback",
                    "airflow_gpu_dag.operators.budget",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "GPU DAG",
                "python-modules": [
                    "airflow_gpu_dag.sensors.dataset",
                    "airflow_gpu_dag.sensors.checkpoint",
                    "airflow_gpu_dag.sensors.window",
                    "airflow_gpu_dag.sensors.start_deadline",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "GPU DAG",
                "python-modules": [
                    "airflow_gpu_dag.triggers.dataset",
                    "airflow_gpu_dag.triggers.checkpoint",
                    "airflow_gpu_dag.triggers.budget",
                ],
            }
        ],
        "cli": ["airflow_gpu_dag.cli.definition.get_gpu_dag_cli_commands"],
        "task-decorators": [{"class-name": "airflow_gpu_dag.decorators.gpu.gpu_task", "name": "gpu"}],
        "config": {
            "gpu_dag": {
                "description": "airflow-gpu-dag settings.",
                "options": {
                    "default_duration": {
                        "description": (
                            "Estimate used for tasks that declare none, unless their DAG sets "
                            "default_args gpu_dag_default_duration (teardowns: 0)."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "30m",
                        "default": "30m",
                    },
                    "pools": {
                        "description": "JSON object of GPU pool -> total slots, used to reject "
                        "impossible requests, unknown pools and an exclusive() or share() whose pool_size "
                        "differs at parse time. Another value is reported by lint (bad-config), logged once "
                        "by the cluster policy, and ignored.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": '{"gpu_default": 8}',
                        "default": "",
                    },
                    "max_gpus_per_host": {
                        "description": "GPUs on the largest host; larger requests are rejected.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "8",
                        "default": "",
                    },
                    "plan_policy": {
                        "description": "How PackingPriorityStrategy plans its weights: reservation (the "
                        "watermark controller reserves slots for wide tasks) or greedy (stock pool "
                        "admission). Another value is reported by lint (bad-config), logged once by the "
                        "cluster policy, and reservation used.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "greedy",
                        "default": "reservation",
                    },
                    "plan_search_budget": {
                        "description": "Simulated tasks the packing planner's local search may spend "
                        "(planning for the reservation controller: 48 one-pass scores per simulated task "
                        "bought, at most 9,000; about 2,900 scores of a 1,000-task DAG at 60000, seconds "
                        "of planning per DAG version). 0 turns it off: searched plans gain with exact "
                        "estimates; they are tuned to them.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "60000",
                        "default": "0",
                    },
                    "objective": {
                        "description": "What the cross-DAG priority optimizes when many DAGs share the GPU "
                        "pools: fair (the default: no kind of DAG pays for the others' gain, p95 and "
                        "makespan nearest stock Airflow's; small runs first, a pipeline's early stages "
                        "first as in stock), throughput (makespan and pipelines first; every wide task "
                        "reserved for), balanced (mean completion time first) or latency (mean completion "
                        "time and small DAGs first). Sets the stretch s (5, 2, 4, 6), the chain c (0.5, 1, "
                        "0.5, 0.5), fair's stage per descendant task and the reservation gate (times in "
                        "stage_length); see "
                        "docs/priority.md. Another value is reported by lint (bad-config), logged once by "
                        "the cluster policy, and fair used.",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "latency",
                        "default": "fair",
                    },
                    "stage_length": {
                        "description": "How long one training stage of the pool runs (a pre-training, an "
                        "SFT). Every time of the objective is a multiple of it: fair moves a key one stage "
                        "per task of descendant lead, caps the due time at 2 stages after the run's work, "
                        "and holds slots at a key gap of 16 stages or for a task that has waited 6; the "
                        "default, 6h, is the stage they were chosen for. Set it to your pool's stages "
                        "(e.g. 20m where a fine-tuning stage takes 20 minutes; try it first with airflow "
                        "gpu-dag simulate --stage-length) to get the same behaviour at your time scale; "
                        "reservation_gap, reservation_overdue and descendant_unit "
                        "override single times after it. Stages over 30h are refused (bad-config): fair's "
                        "24 stages of lead would exceed 30d. lint warns (stage-length-mismatch) when the "
                        "longest GPU task of your DAGs is under a sixth of a stage or over three.",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "20m",
                        "default": None,
                    },
                    "descendant_unit": {
                        "description": "Override of the fair objective's time per descendant task: a "
                        "task's key moves this much earlier per task of its descendant lead (at most 24 "
                        "counted), so a pipeline's early stages go ahead of runs triggered up to that "
                        "many units later. One stage_length by default (6h); to move every time of the "
                        "objective to your tasks, set stage_length instead. 0 turns the term off. Ignored "
                        "by the other objectives; 24 units over 30d are refused (bad-config).",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "30m",
                        "default": None,
                    },
                    "reservation_gap": {
                        "description": "Override of the objective's reservation gap: the controller holds "
                        "slots for a wide task only when its key is this much earlier than the next waiting "
                        "task of another run (or it is overdue). A duration, e.g. 4h; by default the "
                        "objective's, scaled by stage_length.",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "40m",
                        "default": None,
                    },
                    "reservation_overdue": {
                        "description": "Override of the objective's overdue bound: a wide task this long "
                        "past its key is always reserved for, and a task that has waited this long since "
                        "it turned ready (and since its key) starves: nothing behind it is backfilled, "
                        "which bounds every wait; no run is due more than this after its own GPU work "
                        "could end. Under fair (whose keys lie days before the trigger) it is the gate's "
                        "alone, counted from the ready time only; the due cap stays 2 stages. A duration, "
                        "e.g. 8h, at most 30d (longer is refused: bad-config); by default the objective's, "
                        "scaled by stage_length.",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "2h",
                        "default": None,
                    },
                    "key_epoch": {
                        "description": "Epoch of the cross-DAG keys (epoch seconds, not milliseconds, or an "
                        "ISO date); every scheduler, api-server and watermark controller must use the same "
                        "value. A weight is 2147483647 - (key - epoch) seconds, a key being about a run's "
                        "trigger time, so the epoch must lie in the past (a key before it gets the top "
                        "weight, 2147483647: best a date some weeks before the first run, as the default) "
                        "and less than 34 years (2^30 s) ago (older, the watermark controller no longer "
                        "reads weights as keys). Another value is reported by lint (bad-config), logged "
                        "once by the cluster policy, and the default used.",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "2025-01-01T00:00:00+00:00",
                        "default": "2025-01-01T00:00:00+00:00",
                    },
                    "plan_in_background": {
                        "description": "Make packing plans off the scheduler loop, in a subprocess (the "
                        "DAG uses critical-path keys until its plan is ready). false plans inline, which "
                        "blocks the scheduler for seconds on large DAGs. Booleans are read as Airflow reads "
                        "them (true/t/1, false/f/0, any case; yes/no and on/off too); another value is "
                        "reported by lint (bad-config), logged once by the cluster policy, and the default "
                        "used.",
                        "version_added": "0.2.0",
                        "type": "boolean",
                        "example": "false",
                        "default": "true",
                    },
                    "planner_nice": {
                        "description": "The nice level (0-19) of the planning subprocess: the scheduler "
                        "and api-server get the CPU first and plans use what is left, so on a busy "
                        "machine a plan comes later (its DAG keeps critical-path keys until then). 0 "
                        "plans at the scheduler's own priority.",
                        "version_added": "0.2.0",
                        "type": "integer",
                        "example": "0",
                        "default": "19",
                    },
                    "plan_backfill": {
                        "description": "The watermark controller's backfill the packing planner plans "
                        "for: easy (the default, 'backfill: true') or strict ('backfill: strict'). Another "
                        "value is reported by lint (bad-config), logged once by the cluster policy, and easy "
                        "used.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "strict",
                        "default": "easy",
                    },
                    "learned_durations": {
                        "description": "Learn task durations from their recent successful tries (median "
                        "and a high quantile, the declared estimate as prior and fallback) for the plan, "
                        "the UI, the watermark controller and the priority strategy. false: use the "
                        "declared estimates only. A boolean, read as plan_in_background.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "false",
                        "default": "true",
                    },
                    "learned_window": {
                        "description": "How many of a task's most recent successful tries are learned from.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "50",
                        "default": "20",
                    },
                    "learned_quantile": {
                        "description": "The high quantile of the learned tries reported next to the "
                        "estimate (between 0 and 1).",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "0.95",
                        "default": "0.9",
                    },
                    "learned_min_runs": {
                        "description": "Successful tries needed before a task's history replaces its "
                        "declared estimate; at most learned_window (only that many tries are read): a "
                        "larger value is reported by lint (bad-config), logged once by the cluster policy, "
                        "and the defaults used.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "5",
                        "default": "3",
                    },
                    "learned_flag_factor": {
                        "description": "airflow gpu-dag estimates and the UI flag a task whose declared "
                        "estimate is off from the learned one by more than this factor (either way).",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "2",
                        "default": "1.5",
                    },
                    "learned_refresh": {
                        "description": "How old the learned durations behind the priority weights may get: "
                        "every scheduler and api-server re-reads a DAG's recent task durations this often, "
                        "off the scheduler loop (a new DAG version is read at once). A duration of at least "
                        "1s; a shorter one, or one that does not parse, is reported by lint (bad-config), "
                        "logged once by the cluster policy, and the default used.",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "2m",
                        "default": "10m",
                    },
                    "too_large_intervals": {
                        "description": "The watermark controller acts on a waiting task whose request "
                        "exceeds its pool's live capacity (or max_gpus_per_host) after this many "
                        "intervals in a row.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "5",
                        "default": "3",
                    },
                    "too_large_action": {
                        "description": "What the watermark controller does with such a task: fail (the "
                        "task instance fails with a note naming the task, its request and the capacity) "
                        "or keep (it waits; the pool description, the controller log and the UI say why).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "keep",
                        "default": "fail",
                    },
                    "usage_ledger": {
                        "description": "GPU-seconds ledger (JSONL): ended leases are charged to it "
                        "and budget gates read it; default <lease_dir>/usage.jsonl.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/var/lib/airflow/gpu-leases/usage.jsonl",
                        "default": "",
                    },
                    "budget_conn_id": {
                        "description": "Airflow connection of a SQL database (postgres, mysql, sqlite or "
                        "extra sqlalchemy_url) holding one GPU-hour budget ledger for every host: usage, "
                        "gate claims. Unset: each host's usage_ledger file.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "gpu_dag_budget",
                        "default": "",
                    },
                    "budget_claim_ttl": {
                        "description": "How long a budget gate's claim counts when its task never reports "
                        "its usage (a killed worker).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "24h",
                        "default": "24h",
                    },
                    "queues": {
                        "description": "Executor queues that affinity helpers may pin tasks to, with the "
                        "pool of that host and the Kubernetes node labels of its nodes: JSON "
                        '{"host-gpu01": {"pool": "gpu01", "node_labels": {"kubernetes.io/hostname": '
                        '"gpu01"}}}. Unset: pin_to_queue needs pool= (and node_labels= for pods).',
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": '{"host-gpu01": {"pool": "gpu01"}}',
                        "default": "",
                    },
                    "inventory_source": {
                        "description": "Where the host's GPU inventory comes from: auto (NVML when it sees "
                        "GPUs, else the static inventory), nvml or static. The checks made when DAG files "
                        "are parsed (GPU operators, the cluster policy, lint) use the static inventory with "
                        "auto and static, and the GPUs of the host that parses the files only with nvml.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "static",
                        "default": "auto",
                    },
                    "inventory": {
                        "description": "Static GPU inventory for hosts without NVML (demo, CI): shorthand "
                        'like 4xa100:80GiB or JSON {"gpus": [{"index": 0, "type": "a100", '
                        '"memory": "80GiB"}]}. Also what GPU declarations are checked against when DAG files '
                        "are parsed (describe the workers' largest host). One that cannot be read is "
                        "reported by lint (bad-config), logged once by the cluster policy, and not checked "
                        "against.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "4xa100:80GiB",
                        "default": "",
                    },
                    "lease_dir": {
                        "description": "Host-wide directory of the GPU lease table, its lock and the usage "
                        "ledger (default <tmp>/airflow-gpu-dag/leases).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/var/lib/airflow/gpu-leases",
                        "default": "",
                    },
                    "lease_ttl": {
                        "description": "A lease whose heartbeat is older than this is reclaimed: the bound "
                        "on how long a stale lease holds a GPU.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "2m",
                        "default": "2m",
                    },
                    "lease_heartbeat": {
                        "description": "How often a running GPU task renews its lease (at most half of "
                        "lease_ttl).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "10s",
                        "default": "10s",
                    },
                    "lease_poll_interval": {
                        "description": "How often a task waiting for free GPUs retries.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "2s",
                        "default": "2s",
                    },
                    "lease_wait_timeout": {
                        "description": "How long a task waits for free GPUs on its host before it fails.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "10m",
                        "default": "10m",
                    },
                    "watermark_watchdog_interval": {
                        "description": "How often the scheduler checks for GPU pools that a stopped "
                        "watermark controller left shrunk and writes them back to their capacity (fail "
                        "open). 0 turns the watchdog off.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "30s",
                        "default": "10s",
                    },
                },
            }
        },
    }
