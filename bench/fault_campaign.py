"""Rerun the reliability campaign: every hostile input under a stated deadline, its peak memory, what held.

Each case runs `oomguard` (or a short script over its API) as a child process against the campaign's fault
injectors (`tests/watch/hostile.py`: a dripping body, a gzip bomb, a 50 MB label, forged escapes; a fake
wedged NVML; a locked database; SIGTERM; a stepped clock; FIFOs and endless streams; hostile YAML, JSON,
pickles, logs and traces). A case held when the child finished before its deadline, with no internal error
(exit 3), under 512 MB peak RSS (the child's own, from wait4), and its data check passed (no sample lost).

    python bench/fault_campaign.py            # all cases, then the table
    python bench/fault_campaign.py D1 H1      # some of them
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

import itertools

from tests.watch.hostile import Hostile

MEMORY_LIMIT_MB = 512
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
       "HF_HUB_OFFLINE": "1"}  # fmt: skip
FAKE_NVML = REPO / "tests" / "watch" / "fakenvml"
HEALTHY = b'vllm:num_requests_running{engine="0",model_name="m"} 1\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.3\n'  # noqa: E501
WIDE = (
    "\n".join(
        f'{m}{{engine="{e}"}} 0.5'
        for e in range(300)
        for m in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    )
    + "\n"
).encode()
POISON = (
    b'vllm:num_requests_running{engine="0",model_name="m"} 1\n'
    b'vllm:num_requests_waiting{engine="0",model_name="a"} +Inf\n'
    b'vllm:num_requests_waiting{engine="0",model_name="b"} -Inf\n'
)


@dataclass
class Run:
    code: int | None  # None: killed at the hang limit
    wall_s: float
    peak_mb: float
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Outcome:
    case: str
    what: str
    deadline_s: float
    runs: list[Run]
    data_ok: bool
    detail: str

    @property
    def wall_s(self) -> float:
        return max(r.wall_s for r in self.runs)

    @property
    def peak_mb(self) -> float:
        return max(r.peak_mb for r in self.runs)

    @property
    def hung(self) -> bool:
        return any(r.code is None for r in self.runs) or self.wall_s > self.deadline_s

    @property
    def crashed(self) -> bool:
        return any(r.code == 3 or (r.code is not None and r.code < 0) for r in self.runs)

    @property
    def held(self) -> bool:
        return self.data_ok and not self.hung and not self.crashed and self.peak_mb < MEMORY_LIMIT_MB


def child(
    args: list[str],
    deadline_s: float,
    *,
    env: dict[str, str] | None = None,
    signal_after: tuple[float, int] | None = None,
    python: bool = False,
) -> Run:
    """Run `oomguard ARGS` (or `python -c ARGS[0] ARGS[1:]`), killed at 3x the deadline; peak RSS by wait4."""
    argv = [sys.executable, "-c", *args] if python else [sys.executable, "-m", "oomguard", *args]
    # GNU time forks the child from a small process: ru_maxrss is inherited across fork, so a child forked
    # from this (large) bench process would report our memory as its own.
    timer = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile() as rss,
    ):
        if timer is not None:
            argv = [timer, "-q", "-f", "%M", "-o", rss.name, *argv]
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env={**ENV, **(env or {})})
        killer = threading.Timer(3 * deadline_s + 5, proc.kill)
        killer.start()
        if signal_after is not None:
            # GNU time does not pass signals on (SIGTERM ends it and orphans oomguard): signal its child
            delay, signum = signal_after
            threading.Timer(delay, _signal_child, (proc.pid, signum, timer is not None)).start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        killed = not killer.is_alive()
        killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        peak_kb = usage.ru_maxrss
        if timer is not None:
            text = Path(rss.name).read_text().split()
            peak_kb = int(text[-1]) if text and text[-1].isdigit() else peak_kb
        out.seek(0)
        err.seek(0)
        return Run(
            None if killed else proc.returncode,
            wall,
            peak_kb / 1024,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
        )


def _signal_child(pid: int, signum: int, timed: bool) -> None:
    """Send `signum` to oomguard itself: the child of GNU time when it runs under it."""
    if timed:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return  # already gone
        if not children:
            return
        pid = int(children[0])
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def count(db: Path, sql: str) -> int:
    return int(sqlite3.connect(db).execute(sql).fetchone()[0])


class Locked:
    """Another process holding the database's write lock: the disk-full stand-in that needs no mount."""

    def __init__(self, db: Path) -> None:
        code = "import sqlite3,sys,time; d=sqlite3.connect(sys.argv[1],isolation_level=None); d.execute('BEGIN IMMEDIATE'); print('ok',flush=True); time.sleep(600)"  # noqa: E501
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ok"

    def release(self) -> None:
        self.proc.kill()
        self.proc.wait()


Case = Callable[[Hostile, Path], Outcome]
CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        CASES[name] = fn
        return fn

    return register


def watch(url: str, db: Path, *extra: str) -> list[str]:
    return ["watch", "--no-nvml", "--no-host", "--db", str(db), *extra, url]


# ----- watch: data loss ---------------------------------------------------------------------------------


@case("D1")
def d1(h: Hostile, tmp: Path) -> Outcome:
    db = tmp / "p.sqlite"
    runs = [child(watch(f"{h.base}/static/poison", db, "--once"), 20)]
    runs.append(child(watch(f"{h.base}/static/healthy", db, "--count", "3", "--interval", "0.2s"), 20))
    healthy = count(
        db, f"SELECT count(*) FROM samples JOIN series ON id=series_id WHERE target='{h.base}/static/healthy'"
    )
    spill = Path(str(db) + ".unsaved.jsonl")
    return Outcome("D1", "+Inf and -Inf on one engine, then a healthy endpoint", 20, runs,
                   healthy == 9 and not spill.exists(), f"{healthy}/9 healthy samples stored, spill {spill.exists()}")  # fmt: skip  # noqa: E501


@case("D2")
def d2(h: Hostile, tmp: Path) -> Outcome:
    db = tmp / "w.sqlite"
    child(watch(f"{h.base}/static/healthy", db, "--once"), 20)
    lock = Locked(db)
    run = child(
        watch(f"{h.base}/static/wide", db, "--interval", "0.2s"), 30, signal_after=(8.0, signal.SIGTERM)
    )
    lock.release()
    spill = Path(str(db) + ".unsaved.jsonl")
    saved = len(spill.read_text().splitlines()) if spill.exists() else 0
    before = count(db, "SELECT count(*) FROM samples")
    again = child(watch(f"{h.base}/static/healthy", db, "--once"), 20)
    after = count(db, "SELECT count(*) FROM samples")
    return Outcome("D2", "SIGTERM while the database cannot be written", 30, [run, again],
                   saved > 0 and after - before >= saved - 1000 and not spill.exists(),
                   f"{saved} records spilled at SIGTERM, {after - before} rows after the next start")  # fmt: skip  # noqa: E501


@case("D3")
def d3(h: Hostile, tmp: Path) -> Outcome:
    state = tmp / "state"
    env = {"XDG_STATE_HOME": str(state)}
    dirs = [tmp / "one", tmp / "two"]
    runs = []
    for d in dirs:
        d.mkdir()
        db = d / "oomguard-watch.sqlite"
        child(watch(f"{h.base}/static/healthy", db, "--once"), 20, env=env)
    lock = Locked(dirs[0] / "oomguard-watch.sqlite")
    runs.append(child(watch(f"{h.base}/static/wide", dirs[0] / "oomguard-watch.sqlite", "--count", "3", "--interval", "0.2s"), 30, env=env))  # fmt: skip  # noqa: E501
    lock.release()
    runs.append(
        child(watch(f"{h.base}/static/healthy", dirs[1] / "oomguard-watch.sqlite", "--once"), 20, env=env)
    )
    wide_in_other = count(
        dirs[1] / "oomguard-watch.sqlite", f"SELECT count(*) FROM scrapes WHERE target='{h.base}/static/wide'"
    )
    runs.append(
        child(watch(f"{h.base}/static/healthy", dirs[0] / "oomguard-watch.sqlite", "--once"), 20, env=env)
    )
    wide_home = count(
        dirs[0] / "oomguard-watch.sqlite", f"SELECT count(*) FROM scrapes WHERE target='{h.base}/static/wide'"
    )
    return Outcome("D3", "two watches, same database name, different directories", 30, runs,
                   wide_in_other == 0 and wide_home == 3, f"other db got {wide_in_other} foreign scrapes; home got {wide_home}/3")  # fmt: skip  # noqa: E501


@case("D4")
def d4(h: Hostile, tmp: Path) -> Outcome:
    db = tmp / "w.sqlite"
    child(watch(f"{h.base}/static/healthy", db, "--once"), 20)
    lock = Locked(db)
    runs = [child(watch(f"{h.base}/static/wide", db, "--count", "5", "--interval", "0.2s"), 30)]
    spill = Path(str(db) + ".unsaved.jsonl")
    sizes = [len(spill.read_text().splitlines())]
    for _ in range(3):
        runs.append(child(watch(f"{h.base}/static/healthy", db, "--once"), 30))
        sizes.append(len(spill.read_text().splitlines()))
    lock.release()
    runs.append(child(watch(f"{h.base}/static/healthy", db, "--once"), 30))
    growth = [b - a for a, b in itertools.pairwise(sizes)]
    wide = count(db, f"SELECT count(*) FROM scrapes WHERE target='{h.base}/static/wide'")
    return Outcome("D4", "restarts while the database stays unwritable", 30, runs,
                   all(g <= 10 for g in growth) and wide == 5 and not spill.exists(),
                   f"spill lines {sizes} (grows by each run's own records only); {wide}/5 wide scrapes recovered")  # fmt: skip  # noqa: E501


# ----- watch: hangs -------------------------------------------------------------------------------------


@case("H1")
def h1(h: Hostile, tmp: Path) -> Outcome:
    once = child(watch(f"{h.base}/drip", tmp / "d.sqlite", "--once", "--timeout", "2s"), 6)
    both = child(["watch", "--no-nvml", "--no-host", "--timeout", "2s", "--interval", "1s", "--count", "5",
                  "--db", str(tmp / "s.sqlite"), f"{h.base}/static/healthy", f"{h.base}/drip"], 16)  # fmt: skip  # noqa: E501
    prom = child(["watch", "--prometheus", f"{h.base}/drip", "--once", "--timeout", "2s"], 6)
    healthy = count(tmp / "s.sqlite", f"SELECT count(*) FROM scrapes WHERE target='{h.base}/static/healthy'")
    return Outcome("H1", "1 byte/s body; --timeout 2s; beside a healthy target; --prometheus", 16,
                   [once, both, prom], healthy == 5, f"healthy scraped {healthy}/5; once {once.wall_s:.1f} s, prometheus {prom.wall_s:.1f} s")  # fmt: skip  # noqa: E501


@case("H2")
def h2(h: Hostile, tmp: Path) -> Outcome:
    db = tmp / "n.sqlite"
    run = child(["watch", "--no-host", "--interval", "0.2s", "--count", "10", "--timeout", "1s", "--json",
                 "--db", str(db), f"{h.base}/static/healthy"], 15,
                env={"FAKE_NVML": "hang", "PYTHONPATH": f"{FAKE_NVML}{os.pathsep}{ENV['PYTHONPATH']}"})  # fmt: skip  # noqa: E501
    scrapes = count(db, "SELECT count(*) FROM scrapes")
    down = '"subject": "nvml"' in run.stdout and "target_down" in run.stdout
    return Outcome("H2", "NVML call blocks from the fifth call on", 15, [run], scrapes == 10 and down,
                   f"{scrapes}/10 scrapes; nvml reported down: {down}")  # fmt: skip


CLOCK = """
import sys, time
real, t0 = time.time, time.time()
time.time = lambda: real() - 60 if real() - t0 > 1.5 else real()
from oomguard import cli
sys.exit(cli.main(["watch", "--no-nvml", "--no-host", "--interval", "1s", "--count", "4", "--timeout", "3s", "--json",
                   "--db", sys.argv[1], sys.argv[2], sys.argv[3]]))
"""  # noqa: E501


@case("H3")
def h3(h: Hostile, tmp: Path) -> Outcome:
    run = child([CLOCK, str(tmp / "c.sqlite"), f"{h.base}/static/healthy", f"{h.base}/drip"], 14, python=True)
    restarted = "restarts" in run.stdout
    return Outcome(
        "H3", "wall clock steps back 60 s mid-run", 14, [run], not restarted, f"false restart: {restarted}"
    )


SEED_R256 = """
import random, sys, time
from oomguard.watch.store import Store
from oomguard.watch.samples import Sample
s, now, r = Store(sys.argv[1]), time.time(), random.Random(0)
M = ['kv_cache_usage','requests_running','requests_waiting','preemptions','prompt_tokens','generation_tokens','kv_num_gpu_blocks','kv_block_size','gpu_memory_utilization']
for k in range(720):
    s.add(Sample(sys.argv[2], str(e), m, now - 3600 + 5 * k, r.random()) for e in range(256) for m in M)
    if k % 60 == 59: s.flush(0.0)
s.close(now)
"""  # noqa: E501


TICKS = """
import sys, time
from oomguard.watch.scrape import Scraper
from oomguard.watch.store import Store
from oomguard.watch.watcher import Watcher
watcher = Watcher(Store(sys.argv[1]), Scraper([sys.argv[2]], timeout=2.0))
for _ in range(8):
    start, cpu = time.monotonic(), time.process_time(); watcher.tick(time.time())
    print(f"{time.monotonic() - start:.2f} {time.process_time() - cpu:.2f}")
"""
INTERVAL_S = 5.0  # watch's default --interval: a tick must fit in it


@case("H8")
def h8(h: Hostile, tmp: Path) -> Outcome:
    db = tmp / "r256.sqlite"
    seed = child([SEED_R256, str(db), f"{h.base}/static/healthy"], 600, python=True)
    assert seed.code == 0, seed.stderr
    run = child([TICKS, str(db), f"{h.base}/static/healthy"], 30, python=True)
    ticks = [float(x) for x in run.stdout.split()[0::2]]
    cpu = [float(x) for x in run.stdout.split()[1::2]]
    return Outcome("H8", "1 h of 256 DP ranks x 9 metrics stored (1.66M samples); 8 ticks", 30, [run],
                   len(ticks) == 8 and max(ticks) < INTERVAL_S,
                   f"ticks {', '.join(f'{t:.1f}' for t in ticks)} s wall "
                   f"({', '.join(f'{t:.1f}' for t in cpu)} s CPU) against the {INTERVAL_S:g} s interval: "
                   "the stored hour read newest first, a bounded slice a tick (the report: 13 s per tick; "
                   "before: a 22 s first tick)")  # fmt: skip


# ----- watch: crashes, wrong answers, unclear errors --------------------------------------------------------


def simple(
    name: str, what: str, deadline: float, args: list[str], check: Callable[[Run], tuple[bool, str]]
) -> None:
    def run_case(h: Hostile, tmp: Path) -> Outcome:
        run = child([a.replace("{base}", h.base).replace("{tmp}", str(tmp)) for a in args], deadline)
        ok, detail = check(run)
        return Outcome(name, what, deadline, [run], ok, detail)

    CASES[name] = run_case


simple("C1", "gzip bomb (1 MiB -> 1 GiB)", 20, ["watch", "--once", "--no-nvml", "--no-host", "--db", "{tmp}/g.sqlite", "{base}/gzipbomb"],  # noqa: E501
       lambda r: ("once decompressed" in r.stderr, "refused: " + r.stderr.strip().splitlines()[-1][:90] if r.stderr.strip() else ""))  # fmt: skip  # noqa: E501
simple("C2", "50 MB label value", 20, ["watch", "--once", "--no-nvml", "--no-host", "--db", "{tmp}/b.sqlite", "{base}/biglabel"],  # noqa: E501
       lambda r: ("64 KiB" in r.stderr, "line skipped unread"))  # fmt: skip


@case("C5")
def c5(h: Hostile, tmp: Path) -> Outcome:
    db = tmp / "h.sqlite"
    runs = [
        child(watch(f"{h.base}/static/huge", db, "--once"), 20),
        child(watch(f"{h.base}/static/healthy", db, "--once"), 20),
    ]
    return Outcome("C5", "1e308 on two DP engines, then a restart", 20, runs, all(r.code in (0, 1) for r in runs), "no crash, restart clean")  # fmt: skip  # noqa: E501


@case("C6")
def c6(h: Hostile, tmp: Path) -> Outcome:
    runs = []
    for i, shape in enumerate(C6_SHAPES):
        h.static[f"prom{i}"] = shape.encode()
        runs.append(
            child(
                ["watch", "--prometheus", f"{h.base}/static/prom{i}", "--interval", "0.1s", "--count", "2"],
                20,
            )
        )
    wide = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"instance": f"i{i}"}, "values": [[1, "1"]]} for i in range(200_000)]}}  # fmt: skip
    h.static["promwide"] = json.dumps(wide).encode()
    runs.append(child(["watch", "--prometheus", f"{h.base}/static/promwide", "--once"], 20))
    return Outcome("C6", "7 malformed Prometheus answers; 200,000 series", 20, runs,
                   all(r.code in (0, 2) for r in runs), "retried or refused in one line")  # fmt: skip


C6_SHAPES = [
    "[" * 100_000 + "]" * 100_000,
    '{"status":"success","data":{"resultType":"matrix","result":[5]}}',
    '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"a"},"values":[[1,"abc"]]}]}}',
    '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"a"},"values":[[1]]}]}}',
    '{"status":"success","data":{"resultType":"matrix","result":[{"metric":["a"],"values":[]}]}}',
    '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"engine":0},"values":[]}]}}',
    '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":null}]}}',
]


@case("C11")
def c11(h: Hostile, tmp: Path) -> Outcome:
    db = tmp / "bad.sqlite"
    child(watch(f"{h.base}/static/wide", db, "--count", "3", "--interval", "0.1s"), 20)
    with open(db, "r+b") as f:
        f.seek(4096 + 100)
        f.write(os.urandom(8192))
    run = child(watch(f"{h.base}/static/healthy", db, "--once"), 20)
    return Outcome("C11", "corrupted database page", 20, [run], run.code == 2, run.stderr.strip()[-90:])


simple("W1", "two kv_cache_usage series of engine 0 at 60%", 20,
       ["watch", "--once", "--no-nvml", "--no-host", "--db", "{tmp}/t.sqlite", "{base}/static/twoseries"],
       lambda r: ("120%" not in r.stdout, "no 120% alert"))  # fmt: skip
simple("W4", "terminal escapes and a forged alert line in a label", 20,
       ["watch", "--count", "1", "--no-nvml", "--no-host", "--db", "{tmp}/f.sqlite", "{base}/forge"],
       lambda r: ("\x1b" not in r.stdout + r.stderr and "\nCRITICAL" not in r.stdout, "escaped"))  # fmt: skip
simple("W5", "a counter at +Inf every third scrape", 20,
       ["watch", "--count", "4", "--interval", "0.2s", "--json", "--no-nvml", "--no-host", "--db", "{tmp}/i.sqlite", "{base}/static/infcounter"],  # noqa: E501
       lambda r: ("restarts" not in r.stdout and "NaN" not in r.stdout and "Infinity" not in r.stdout, "no false restart, strict JSON"))  # fmt: skip  # noqa: E501
simple(
    "W9",
    "rules --leak-window 1ms",
    20,
    ["rules", "--leak-window", "1ms"],
    lambda r: (r.code == 2, r.stderr.strip()[:90]),
)
simple("W10", "body shorter than its Content-Length", 20,
       ["watch", "--once", "--no-nvml", "--no-host", "--db", "{tmp}/x.sqlite", "{base}/truncated"],
       lambda r: ("closed mid-body" in r.stderr + r.stdout, "failed scrape: connection closed mid-body"))  # fmt: skip  # noqa: E501
simple("U2", "watch --timeout 0", 20, ["watch", "--once", "--timeout", "0", "localhost:1"],
       lambda r: (r.code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr.strip()[:90]))  # fmt: skip  # noqa: E501


# ----- outside watch: bounded inputs
# -------------------------------------------------------------------------

QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,  # noqa: E501
         "num_hidden_layers": 10, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
         "vocab_size": 151936, "max_position_embeddings": 40960, "torch_dtype": "bfloat16"}  # fmt: skip


def refused(run: Run) -> bool:
    return run.code == 2 and len(run.stderr.strip().splitlines()) == 1


@case("H4")
def h4(h: Hostile, tmp: Path) -> Outcome:
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    runs = [
        child(["check", str(fifo)], 15),
        child(["check", "/dev/zero"], 15),
        child(["simulate", "/dev/zero", "--model", "Qwen/Qwen3-0.6B", "--gpu", "H100"], 15),
        child(["plan", "--gpu", "H100", "--", "vllm", "serve", "--config", "/dev/zero"], 15),
        child(["plan", "Qwen/Qwen3-0.6B", "--gpu", "H100", "--nvidia-smi", "/dev/zero"], 15),
    ]
    return Outcome("H4", "a FIFO without a writer; the zero device to check, simulate, --config, --nvidia-smi", 15,  # noqa: E501
                   runs, all(refused(r) for r in runs), "; ".join(r.stderr.strip()[-40:] for r in runs[:2]))  # fmt: skip  # noqa: E501


@case("H7")
def h7(h: Hostile, tmp: Path) -> Outcome:
    big = tmp / "big.yaml"
    big.write_text("model: Qwen/Qwen3-0.6B\nx: [" + ", ".join(["1"] * 3_000_000) + "]\n")
    keys = tmp / "keys.yaml"
    keys.write_text("model: Qwen/Qwen3-0.6B\n" + "".join(f"k{i}: {i}\n" for i in range(500_000)))
    runs = [
        child(["plan", "--gpu", "H100", "--", "vllm", "serve", "--config", str(p)], 10) for p in (big, keys)
    ]
    runs.append(child(["check", str(keys)], 10))  # a manifest may be 8 MiB: refused by its node count
    return Outcome("H7", "a 9 MB YAML flow list; 500,000 keys as --config and as a manifest", 10, runs,
                   all(refused(r) for r in runs), runs[2].stderr.strip()[-60:])  # fmt: skip


@case("C9")
def c9(h: Hostile, tmp: Path) -> Outcome:
    (tmp / "deep").mkdir()
    (tmp / "deep" / "config.json").write_text('{"a":' * 200_000 + "1" + "}" * 200_000)
    trace = tmp / "t.jsonl"
    trace.write_text(
        '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n' + "[" * 100_000 + "]" * 100_000 + "\n"
    )
    deep = "[" * 20_000 + "]" * 20_000
    runs = [child(["plan", str(tmp / "deep"), "--gpu", "H100"], 15),
            child(["plan", "--gpu", "H100", "--", "vllm", "serve", "Qwen/Qwen3-0.6B", "--hf-overrides", deep], 15),  # noqa: E501
            child(["simulate", str(trace), "--model", "Qwen/Qwen3-0.6B", "--gpu", "H100"], 15)]  # fmt: skip
    return Outcome("C9", "JSON nested 200,000 deep: config.json, --hf-overrides, a JSONL trace line", 15, runs,  # noqa: E501
                   all(r.code == 2 for r in runs), "one-line errors")  # fmt: skip


@case("C10")
def c10(h: Hostile, tmp: Path) -> Outcome:
    configs = {
        "layers": json.dumps(QWEN3).replace('"num_hidden_layers": 10', '"num_hidden_layers": 1' + "0" * 400),
        "rope_inf": json.dumps({**QWEN3, "rope_scaling": {"rope_type": "yarn", "factor": 1e308}}),
        "rope_nan": json.dumps({**QWEN3, "rope_scaling": {"rope_type": "linear", "factor": float("nan")}}),
        "rope_neg": json.dumps({**QWEN3, "rope_scaling": {"rope_type": "linear", "factor": -1000}}),
    }
    runs = []
    for name, text in configs.items():
        (tmp / name).mkdir()
        (tmp / name / "config.json").write_text(text)
        runs.append(child(["plan", str(tmp / name), "--gpu", "H100"], 15))
    return Outcome("C10", "10**400 layers; rope factor 1e308, NaN, -1000 in config.json", 15, runs,
                   all(refused(r) for r in runs), "one-line errors")  # fmt: skip


AZURE_TZ = """
import sys
from datetime import datetime, timedelta
t = datetime(2024, 11, 3, 0, 50)
open(sys.argv[1], "w").write("TIMESTAMP,ContextTokens,GeneratedTokens\\n" + "".join(
    f"{(t + timedelta(minutes=i)):%Y-%m-%d %H:%M:%S}.0000000,500,50\\n" for i in range(120)))
"""


@case("W7")
def w7(h: Hostile, tmp: Path) -> Outcome:
    trace = tmp / "dst.csv"
    child([AZURE_TZ, str(trace)], 10, python=True)
    runs = [child(["simulate", str(trace), "--model", "Qwen/Qwen3-0.6B", "--gpu", "H100"], 60, env={"TZ": tz})
            for tz in ("UTC", "America/New_York")]  # fmt: skip
    same = runs[0].stdout == runs[1].stdout and runs[0].code == runs[1].code
    return Outcome("W7", "an Azure trace across the November DST change, TZ=UTC vs America/New_York", 60, runs,  # noqa: E501
                   same, "same output in both zones" if same else "outputs differ")  # fmt: skip


@case("W8")
def w8(h: Hostile, tmp: Path) -> Outcome:
    run = child(
        ["check", "--min-concurrency", "nan", "--gpu", "H100", "--", "vllm", "serve", "Qwen/Qwen3-0.6B"], 15
    )
    return Outcome("W8", "check --min-concurrency nan", 15, [run], refused(run), run.stderr.strip()[-60:])


@case("W2")
def w2(h: Hostile, tmp: Path) -> Outcome:
    base = [
        "simulate",
        "--synthetic",
        "poisson:rate=5,duration=20",
        "--model",
        "Qwen/Qwen3-0.6B",
        "--gpu",
        "H100",
    ]
    ignored = [
        child([*base, "--sweep", s], 30)
        for s in ("model=Qwen/Qwen3-8B", "no_such_flag=1,2", "enable_prefix_caching=maybe")
    ]
    empty = child([*base, "--sweep", "max_model_len=1,10,100"], 30)
    ok = (
        all(refused(r) for r in ignored)
        and empty.code == 1
        and "no value of max_model_len is safe" in empty.stdout
    )
    return Outcome("W2", "--sweep over names simulate ignores; a sweep rejecting every request", 30,
                   [*ignored, empty], ok, "refused in one line; an empty run is not safe")  # fmt: skip


@case("W3")
def w3(h: Hostile, tmp: Path) -> Outcome:
    # the endpoint is on loopback, so the host probe finds its listener (this bench) and samples it too
    db = tmp / "p.sqlite"
    h.static["started"] = HEALTHY + b"process_start_time_seconds 1234.5\n"
    run = child(
        [
            "watch",
            "--no-nvml",
            "--count",
            "2",
            "--interval",
            "0.2s",
            "--db",
            str(db),
            f"{h.base}/static/started",
        ],
        20,
    )
    query = "SELECT value FROM samples JOIN series ON id=series_id WHERE metric='process_start_time'"
    values = {row[0] for row in sqlite3.connect(db).execute(query)}
    return Outcome("W3", "a loopback endpoint's own process_start_time beside the host probe", 20, [run],
                   values == {1234.5}, f"stored start times {sorted(values)}")  # fmt: skip


# ----- diagnose ---------------------------------------------------------------------------------------------

SNAPSHOTS = """
import os, pickle, sys
N = 20000
b = {'size': 1, 'state': 'active_allocated', 'frames': [{'filename': 'a.py', 'line': 1, 'name': 'f'}]}
pickle.dump({'segments': [{'total_size': 1, 'blocks': [b] * N}] * N}, open(sys.argv[1] + '/laughs.pickle', 'wb'), protocol=4)
bad = [{'segments': [{'total_size': 'abc'}]}, {'segments': [{'total_size': float('inf')}]},
       {'segments': [{'total_size': 1, 'blocks': 5}]}, {'segments': [{'total_size': 1, 'blocks': [{'size': [1]}]}]},
       {'segments': [], 'device_traces': [[{'action': 'oom', 'size': 'huge'}]]}, {'segments': [], 'device_traces': 7}]
for i, s in enumerate(bad):
    pickle.dump(s, open(f'{sys.argv[1]}/bad{i}.pickle', 'wb'))
class H:
    def __reduce__(self): return (os.system, ('touch ' + sys.argv[1] + '/pwned',))
pickle.dump(H(), open(sys.argv[1] + '/hostile.pickle', 'wb'), protocol=0)
"""  # noqa: E501


@case("H5")
def h5(h: Hostile, tmp: Path) -> Outcome:
    child([SNAPSHOTS, str(tmp)], 30, python=True)
    run = child(["diagnose", str(tmp / "laughs.pickle")], 10)
    return Outcome("H5", "80 KB snapshot: 20,000 segments sharing one list of 20,000 blocks", 10, [run],
                   run.code == 0, f"read in {run.wall_s:.1f} s; a shared object counted once")  # fmt: skip


@case("C8")
def c8(h: Hostile, tmp: Path) -> Outcome:
    child([SNAPSHOTS, str(tmp)], 30, python=True)
    runs = [child(["diagnose", str(tmp / f"bad{i}.pickle")], 10) for i in range(6)]
    return Outcome("C8", "6 snapshot pickles with wrong-typed fields", 10, runs,
                   all(refused(r) and ("not a size" in r.stderr or "not a list" in r.stderr) for r in runs),
                   "each refused in one line naming the field")  # fmt: skip


@case("U3")
def u3(h: Hostile, tmp: Path) -> Outcome:
    child([SNAPSHOTS, str(tmp)], 30, python=True)
    run = child(["diagnose", str(tmp / "hostile.pickle")], 10)
    ok = refused(run) and "refused opcode GLOBAL" in run.stderr and not (tmp / "pwned").exists()
    return Outcome(
        "U3", "a refused pickle given alone", 10, [run], ok, "the reason named: refused opcode GLOBAL"
    )


C3_MIB = 64  # the report's file held 256 MiB: memory is flat in the size, the time linear
C3_DEADLINE_S = 240.0


@case("C3")
def c3(h: Hostile, tmp: Path) -> Outcome:
    path = tmp / "m.prom.gz"
    line = b'vllm:num_requests_running{engine="0"} 1\n'  # every line repeats the series: a scrape each
    block = line * 100_000
    with gzip.open(path, "wb") as out:
        out.write(b"# TYPE vllm:num_requests_running gauge\n")
        for _ in range(C3_MIB * 2**20 // len(block)):
            out.write(block)
    run = child(["diagnose", str(path)], C3_DEADLINE_S)
    read = [x for x in run.stdout.splitlines() if "prometheus-metrics" in x]
    return Outcome("C3", f"{C3_MIB} MiB of metrics text, one scrape a line, in a "
                   f"{path.stat().st_size >> 10} KiB .gz", C3_DEADLINE_S, [run], run.code == 0 and bool(read),
                   read[0].strip()[-60:] if read else run.stderr.strip()[-80:])  # fmt: skip


@case("C7")
def c7(h: Hostile, tmp: Path) -> Outcome:
    prom = tmp / "inf.prom"
    prom.write_text('vllm:num_requests_running{engine="0"} +Inf\nvllm:num_requests_waiting{engine="0"} 3\n'
                    'vllm:kv_cache_usage_perc{engine="0"} 0.5\n')  # fmt: skip
    run = child(["diagnose", "--json", str(prom)], 10)
    ok = run.code == 0 and "not a finite number" in run.stdout
    return Outcome(
        "C7", "a metrics file with num_requests_running +Inf", 10, [run], ok, "the line skipped, noted"
    )


HOST_RAM_LOG = (
    'ERROR 06-02 09:39:03 [core.py:396]   File "/opt/img/site-packages/vllm/model_executor/model_loader/'
    'weight_utils.py", line 441, in safetensors_weights_iterator\n'
    'ERROR 06-02 09:39:03 [core.py:396]     with safe_open(st_file, framework="pt") as f:\n'
    "ERROR 06-02 09:39:03 [core.py:396] RuntimeError: unable to mmap 16933256392 bytes from file "
    "</models/model.safetensors>: Cannot allocate memory (12)\n"
)


def _first_line(run: Run) -> str:
    return run.stdout.splitlines()[0] if run.stdout else ""


@case("W6")
def w6(h: Hostile, tmp: Path) -> Outcome:
    plain, cr, docker = tmp / "host.log", tmp / "host-cr.log", tmp / "host-docker.log"
    plain.write_text(HOST_RAM_LOG)
    cr.write_text(HOST_RAM_LOG.replace("\n", "\r"))
    docker.write_text(
        "".join(
            json.dumps({"log": line, "stream": "stderr", "time": "2026-06-02T09:39:03Z"}) + "\n"
            for line in HOST_RAM_LOG.splitlines(keepends=True)
        )
    )
    runs = [child(["diagnose", str(p)], 10) for p in (plain, cr, docker)]
    answers = {_first_line(r) for r in runs}
    return Outcome(
        "W6",
        "a host-RAM OOM log with CR-only endings and as Docker json-file records",
        10,
        runs,
        len(answers) == 1 and "host-ram-oom" in runs[0].stdout,
        " / ".join(sorted(answers)),
    )


@case("U1")
def u1(h: Hostile, tmp: Path) -> Outcome:
    runs = []
    for name, data in (
        ("bom", HOST_RAM_LOG.encode("utf-16")),
        ("le", HOST_RAM_LOG.encode("utf-16-le")),
        ("bz2", bz2.compress(HOST_RAM_LOG.encode())),
        ("xz", lzma.compress(HOST_RAM_LOG.encode())),
    ):
        (tmp / f"{name}.log").write_bytes(data)
        runs.append(child(["diagnose", str(tmp / f"{name}.log")], 10))
    return Outcome(
        "U1",
        "the log as UTF-16 (BOM, no BOM), bzip2 and xz",
        10,
        runs,
        all(r.code == 0 and "host-ram-oom" in r.stdout for r in runs),
        "read: same cause as plain",
    )


OOM_LINE = (
    b"ERROR 02-11 08:25:49 serving_chat.py:661] torch.OutOfMemoryError: CUDA out of memory. "
    b"Tried to allocate 1.15 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.13 GiB is free. "
    b"Process 64697 has 78.00 GiB memory in use.\n"
)
H6_LINES = 20_000
H6_DEADLINE_S = 120.0  # 2.4 ms a line: the pace a server in a crash loop cannot outrun


@case("H6")
def h6(h: Hostile, tmp: Path) -> Outcome:
    log = tmp / "oom.log"
    log.write_bytes(OOM_LINE * H6_LINES)
    run = child(["diagnose", str(log)], H6_DEADLINE_S)
    rate = log.stat().st_size / 2**20 / max(run.wall_s, 1e-9)
    size_mib = log.stat().st_size / 2**20
    return Outcome(
        "H6",
        f"{H6_LINES:,} OOM lines ({size_mib:.0f} MiB), each parsed in full",
        H6_DEADLINE_S,
        [run],
        run.code == 0,
        f"{rate:.2f} MiB/s wall, memory flat",
    )


# ----- simulate and the Python API ----------------------------------------------------------------------


C4_ROWS = 10_000_000
C4_DEADLINE_S = 180.0  # the report's load took 145 s (and 5.5 GB) before failing for memory at larger sizes


def write_rows(path: Path, rows: int) -> None:
    """`rows` requests of a CSV trace, 100 a second, with lengths that vary (one `join` per second of
    arrivals: a 10M-row file in a few seconds)."""
    per_second = 100
    tails = [b"%02d,%d,%d\n" % (j, 50 + j * 7919 % 1950, 10 + j * 104729 % 290) for j in range(per_second)]
    with path.open("wb") as out:
        out.write(b"arrival_s,prompt_tokens,output_tokens\n")
        for second in range(rows // per_second):
            head = b"%d." % second
            out.write(head + head.join(tails))


@case("C4")
def c4(h: Hostile, tmp: Path) -> Outcome:
    trace = tmp / "rows10m.csv"
    write_rows(trace, C4_ROWS)
    size_mb = trace.stat().st_size / 1e6
    run = child(["simulate", str(trace), "--model", "Qwen/Qwen3-0.6B", "--gpu", "H100", "--max-steps", "1"],
                C4_DEADLINE_S)  # fmt: skip
    return Outcome("C4", f"a CSV trace of {C4_ROWS:,} rows ({size_mb:.0f} MB), --max-steps 1", C4_DEADLINE_S,
                   [run], run.code == 0 and "stopped after --max-steps 1" in run.stdout,
                   "streamed into columns (24 bytes a row); requests built as they arrive")  # fmt: skip


@case("U4")
def u4(h: Hostile, tmp: Path) -> Outcome:
    trace = tmp / "ids.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prefix_ids\n0,10,5," + "9" * 5000 + "\n")
    run = child(["simulate", str(trace), "--model", "Qwen/Qwen3-0.6B", "--gpu", "H100"], 15)
    return Outcome("U4", "a CSV prefix id of 5,000 digits", 15, [run], refused(run) and len(run.stderr) < 300,
                   f"{len(run.stderr.strip())}-character error")  # fmt: skip


API_CALLS = """
from oomguard import plan, diagnose
from oomguard.errors import OomguardError
from oomguard.planning import PlanRequest
from oomguard.planning.check import check_command
M = "Qwen/Qwen3-0.6B"
calls = [lambda: plan(None), lambda: plan(123), lambda: plan(model=M, gpu=123), lambda: PlanRequest(model=M, gpu=123),
         lambda: plan(model=M, gpu_memory=float("nan")), lambda: plan(model=M, gpu_memory=float("inf")),
         lambda: plan(model=M, gpu="H100", replicas_per_gpu="2"), lambda: PlanRequest(model=M, usage="bogus"),
         lambda: PlanRequest(model=M, measured=None), lambda: PlanRequest(model=M, measured={"weights": -10**12}),
         lambda: plan(model=M, used_by_other_processes="1GiB"), lambda: PlanRequest(model=M, used_by_other_processes=float("nan")),
         lambda: PlanRequest.from_argv(None), lambda: check_command(None), lambda: check_command(123),
         lambda: check_command("vllm serve " + M, gpu="H100", min_headroom=None),
         lambda: check_command("vllm serve " + M, gpu="H100", min_headroom=float("nan")),
         lambda: check_command("vllm serve " + M, gpu="H100", min_concurrency="8"),
         lambda: plan(model=M, gpu="H100", at_lengths=["x"]), lambda: plan(model=M, gpu="H100", node_gpus="x"),
         lambda: diagnose(123)]
untyped = []
for i, call in enumerate(calls):
    try:
        call()
        untyped.append(f"{i}: accepted")
    except OomguardError:
        pass
    except Exception as err:
        untyped.append(f"{i}: {type(err).__name__}")
print(len(calls), "calls;", "; ".join(untyped) or "all OomguardError")
"""  # noqa: E501


@case("C12")
def c12(h: Hostile, tmp: Path) -> Outcome:
    run = child([API_CALLS], 30, python=True)
    return Outcome("C12", "the Python API called with wrong types and values", 30, [run],
                   run.code == 0 and "all OomguardError" in run.stdout, run.stdout.strip())  # fmt: skip


def main(names: list[str]) -> int:
    hostile = Hostile(drip_s=1.0, bomb_mib=1024, label_bytes=50 << 20).start()
    hostile.static.update(healthy=HEALTHY, wide=WIDE, poison=POISON,
                          huge=b'vllm:kv_cache_usage_perc{engine="0"} 1e308\nvllm:kv_cache_usage_perc{engine="1"} 1e308\n',  # noqa: E501
                          twoseries=b'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.6\nvllm:kv_cache_usage_perc{engine="0",model_name="b"} 0.6\n',  # noqa: E501
                          infcounter=b'vllm:num_requests_running{engine="0"} 1\nvllm:num_preemptions_total{engine="0"} +Inf\n')  # fmt: skip  # noqa: E501
    hostile.bomb()
    outcomes = []
    try:
        for name, run_case in CASES.items():
            if names and name not in names:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                outcome = run_case(hostile, Path(tmp))
            outcomes.append(outcome)
            print(
                f"{name}: {'held' if outcome.held else 'FAILED'} ({outcome.detail})",
                file=sys.stderr,
                flush=True,
            )
    finally:
        hostile.stop()
    print("| finding | input | deadline | slowest run | peak RSS | held | detail |")
    print("|---|---|---:|---:|---:|---|---|")
    for o in outcomes:
        print(f"| {o.case} | {o.what} | {o.deadline_s:g} s | {o.wall_s:.1f} s | {o.peak_mb:.0f} MB | "
              f"{'yes' if o.held else 'NO'} | {o.detail} |")  # fmt: skip
    lost = sum(1 for o in outcomes if not o.data_ok)
    hangs = sum(1 for o in outcomes if o.hung)
    over = sum(1 for o in outcomes if o.peak_mb >= MEMORY_LIMIT_MB)
    print(f"\n{len(outcomes)} cases: {sum(o.held for o in outcomes)} held; data loss or wrong answer {lost}, "
          f"hangs past the deadline {hangs}, crashes {sum(o.crashed for o in outcomes)}, "
          f"peak memory >= {MEMORY_LIMIT_MB} MB {over}")  # fmt: skip
    return 0 if all(o.held for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
