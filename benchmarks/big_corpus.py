"""A 1 GB text corpus through xfmr-train: tokenization speed, token cache size, first and second
start, and the training process's peak memory beside the same run on tiny Shakespeare.

    nice -n 10 python benchmarks/big_corpus.py --data ../../shared/data --size-mb 1024

Corpus: --size-mb MB (10^6 bytes) of lines sampled with replacement, by `random.Random(--seed)`,
from the non-blank lines of the --source files (default: tiny Shakespeare, multi30k train.en
and train.de, the sentence column of sst2 train.tsv, all under --data), written a chunk at a
time and cut to the exact size. The file is named by size and seed and reused when it exists
with that size.

Run: `xfmr-train experiment=nanogpt_shakespeare_char tokenizer=byte_bpe data.path=CORPUS` (the
nanoGPT CPU model, 4 layers, d 128, block 64, batch 12; GPT-2 byte-level BPE at its configured
vocabulary), --steps steps, 2 validation batches, no checkpoints, samples or loggers, and
throughput.peak_tflops set so that no matmul peak is measured before the first step.
XFMR_CACHE_DIR is a directory of its own per corpus, emptied before the first start.

Figures. Times are wall clock from starting the child process to a log line it writes, stamped
as each line arrives; the first training step is marked by a callback (`FirstStep`) in the
child that prints the wall-clock time at the end of its first batch.
- first start: tokenizer trained and token cache built; second start: a new run directory, the
  same cache directory. The second must log "token cache: memory-mapped" and not "built", and
  load the tokenizer from its cache.
- tokenizer training: from "tokenizer: trained on the first N MB" (logged when the sample,
  read once to fingerprint it, is a part of the training split, just before training on it)
  to "tokenizer: ... (trained)". A sample that is the whole split logs no such line: then the
  second start's time to "tokenizer: ... (cached)" (the same fingerprinting read, no training)
  is subtracted instead.
- tokenization: the cache's own log line, "built in S s (R MB/s)": the corpus's bytes over the
  wall time of the parallel encode (every core this process may use) and the file writes.
- tokenization per CPU-second: the first --rate-mb MB of the corpus encoded in this process
  as the cache's workers encode it (`encode_chunk` on the same chunks, the first start's
  tokenizer), over the CPU time it took: what one core gives when nothing else runs on it.
- CPU time: the child's user + system time, its encoding workers included.
- cache size: blocks on disk of the token cache directory (du), and of the cached tokenizer.
- peak RSS: each child is reaped with os.wait4 on its own pid, whose rusage is that child's
  (the maximum of its own and its reaped descendants' ru_maxrss), so one measurement never
  sees another's, as RUSAGE_CHILDREN of this process would (the maximum over every child
  waited for so far). The big corpus's figure is its second start's, the Shakespeare figure
  that of a second run on Shakespeare (after a first that built its caches): the same model
  and settings, both reading tokens from a memory-mapped cache, no tokenizer training, no
  encoding. DataLoader workers are 0, so the figure is the training process itself.

The machine may be running other work: times are upper bounds; the load average is printed.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
import torch

from common.cli import command_line, script_parser
from common.xfmr_runs import QUIET, child_env, shakespeare_run, train_command
from xfmr.training.throughput import cpu_model

MB = 1_000_000  # as xfmr's tokenizer.train_sample_mb and token cache logs count
LINES_PER_CHUNK = 50_000  # sampled lines written at a time (a few MB)
RSS_BUDGET_MB = 200  # the big corpus may cost at most this much more resident memory
DEFAULT_SOURCES = (
    "tinyshakespeare/input.txt",
    "multi30k/train.en",
    "multi30k/train.de",
    "sst2/train.tsv",
)
SHAKESPEARE = "tinyshakespeare/input.txt"
FIRST_STEP = "big_corpus: first training step ended at "
SAMPLE_LINE = re.compile(r"tokenizer: trained on the first")
TOKENIZER_LINE = re.compile(r"tokenizer: \w+, vocabulary (\d+) \((trained|cached)\)")
BUILT_LINE = re.compile(
    r"token cache: built in ([\d.]+) s \(([\d.]+) MB/s\), (\d+) tokens, ([\d.]+) MB in (\S+)"
)
MAPPED_LINE = re.compile(r"token cache: memory-mapped (\d+) tokens from (\S+)")


# --------------------------------------------------------------------------- the corpus


def source_lines(path: Path) -> list[str]:
    """A source's non-blank lines, stripped; a .tsv file's `sentence` column (else its last)."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line]
    if path.suffix == ".tsv":
        header = lines[0].split("\t")
        column = header.index("sentence") if "sentence" in header else -1
        lines = [line.split("\t")[column] for line in lines[1:]]
    if not lines:
        sys.exit(f"--source {path}: no text in it")
    return lines


def generate_corpus(path: Path, size_bytes: int, sources: list[Path], seed: int) -> bool:
    """Write `size_bytes` of sampled lines to `path` (unless it already has that size); returns
    whether the file was reused. Written under a temporary name, renamed once whole."""
    if path.is_file() and path.stat().st_size == size_bytes:
        return True
    pool = [line for source in sources for line in source_lines(source)]
    rng = random.Random(seed)
    tmp = path.with_name(path.name + ".tmp")
    written = 0
    with open(tmp, "wb") as out:
        while written < size_bytes:
            data = ("\n".join(rng.choices(pool, k=LINES_PER_CHUNK)) + "\n").encode()
            left = size_bytes - written
            if len(data) > left:  # the last chunk: cut at a character, pad to the exact size
                data = data[:left].decode("utf-8", errors="ignore").encode()
                data += b"\n" * (left - len(data))
            written += out.write(data)
    os.replace(tmp, path)
    return False


# --------------------------------------------------------------------------- running xfmr-train


class FirstStep(L.Callback):
    """Prints the wall-clock time at the end of the first training batch (loaded in the child
    through `+callbacks.first_step._target_=big_corpus.FirstStep`)."""

    def __init__(self) -> None:
        self.done = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self.done:
            self.done = True
            print(f"{FIRST_STEP}{time.time():.3f}", file=sys.stderr, flush=True)


@dataclass
class Run:
    name: str
    wall_s: float
    peak_rss_mb: float
    cpu_s: float
    lines: list[tuple[float, str]] = field(default_factory=list)  # (seconds since start, line)
    first_step_s: float | None = None

    def find(self, pattern: re.Pattern) -> tuple[float, re.Match] | None:
        """The first line matching `pattern`: (seconds since start, match)."""
        for seconds, line in self.lines:
            match = pattern.search(line)
            if match:
                return seconds, match
        return None


def overrides(data: Path, steps: int) -> list[str]:
    return [
        *shakespeare_run(data, steps),
        "tokenizer=byte_bpe",
        "trainer.limit_val_batches=2",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        f"schedule.warmup_steps={max(1, steps // 5)}",
        "throughput.peak_tflops=1.0",  # mfu is not reported; measuring the peak would delay step 1
        "callbacks.model_checkpoint=null",
        "+callbacks.first_step._target_=big_corpus.FirstStep",
        "logger=none",
        *QUIET,
    ]


def run_train(name: str, data: Path, out: Path, cache_dir: Path, steps: int) -> Run:
    """xfmr-train on `data` in out/runs/`name`, its output kept in out/runs/`name`.log."""
    run_dir = out / "runs" / name
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = train_command(*overrides(data, steps), f"hydra.run.dir={run_dir}")
    env = child_env(cache_dir, callbacks=True, PYTHONUNBUFFERED="1")
    started = time.time()
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = [(time.time() - started, line.rstrip("\n")) for line in proc.stdout]
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (see the docstring)
    wall = time.time() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    (out / "runs" / f"{name}.log").write_text("".join(f"{s:8.2f} {t}\n" for s, t in lines))
    if proc.returncode != 0:
        sys.exit(f"{name}: xfmr-train exited with {proc.returncode}; see {out}/runs/{name}.log")
    cpu = usage.ru_utime + usage.ru_stime
    run = Run(name, wall, usage.ru_maxrss / 1024, cpu, lines)  # Linux: ru_maxrss in KiB
    for _, line in lines:
        if line.startswith(FIRST_STEP):
            run.first_step_s = float(line.removeprefix(FIRST_STEP)) - started
    return run


# --------------------------------------------------------------------------- figures


def disk_mb(path: Path) -> float:
    """Space the files under `path` take on disk (du), in MB."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_blocks * 512 for p in files) / MB


def encode_rate(corpus: Path, tokenizer_json: Path, size_mb: int) -> float:
    """MB of the corpus's head encoded per CPU-second, in this process, as the cache does."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # as in the cache's workers
    from xfmr.text.chunks import CHUNK_CHARS, cut_chunks, encode_chunk
    from xfmr.text.tokenizers import TextTokenizer

    tokenizer = TextTokenizer.load(tokenizer_json)
    with open(corpus, "rb") as f:
        text = f.read(size_mb * MB).decode("utf-8", errors="ignore")
    started = time.process_time()
    for chunk in cut_chunks([text], CHUNK_CHARS):
        encode_chunk(tokenizer, chunk)
    return len(text.encode()) / MB / (time.process_time() - started)


def second_start_check(second: Run) -> str:
    """'' if the second start neither encoded the corpus nor trained a tokenizer, else why not."""
    problems = []
    if second.find(BUILT_LINE) or not second.find(MAPPED_LINE):
        problems.append("the token cache was built again")
    tokenizer = second.find(TOKENIZER_LINE)
    if tokenizer is None or tokenizer[1][2] != "cached":
        problems.append("the tokenizer was trained again")
    return "; ".join(problems)


def machine() -> str:
    return (
        f"{cpu_model()}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads"
    )


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_table(corpus: Path, reused: bool, runs: dict[str, Run], rate: float, loads) -> None:
    first, second, small = runs["first"], runs["second"], runs["shakespeare"]
    built = first.find(BUILT_LINE)
    if built is None:
        sys.exit("the first start logged no 'token cache: built' line: was the cache not empty?")
    build_s, build_rate, tokens, _, cache_path = built[1].groups()
    trained_at, vocabulary = first.find(TOKENIZER_LINE)[0], first.find(TOKENIZER_LINE)[1][1]
    cached_at = second.find(TOKENIZER_LINE)[0]
    sampled = first.find(SAMPLE_LINE)
    training_s = trained_at - (sampled[0] if sampled else cached_at)
    corpus_mb = corpus.stat().st_size / MB
    difference = second.peak_rss_mb - small.peak_rss_mb
    within = "within" if abs(difference) <= RSS_BUDGET_MB else "MORE THAN"
    rows = [
        ("corpus", f"{corpus} ({corpus_mb:.0f} MB, {'reused' if reused else 'generated'})"),
        ("byte-level BPE vocabulary", vocabulary),
        ("tokenizer training, s", seconds(training_s)),
        ("token cache build, s", f"{float(build_s):.1f}"),
        ("tokenization, MB/s (wall, all cores)", f"{float(build_rate):.2f}"),
        ("tokenization, MB per CPU-second (one process)", f"{rate:.2f}"),
        (
            "tokens (corpus bytes per token)",
            f"{int(tokens):,} ({corpus_mb * MB / int(tokens):.2f})",
        ),
        ("token cache on disk, MB", f"{disk_mb(Path(cache_path)):.1f}"),
        (
            "tokenizer cache on disk, MB",
            f"{disk_mb(Path(cache_path).parents[1] / 'tokenizers'):.2f}",
        ),
        ("first start: tokenizer ready / first step / exit, s", milestones(first, trained_at)),
        ("second start: tokenizer ready / first step / exit, s", milestones(second, cached_at)),
        ("first / second start: CPU time, s", f"{first.cpu_s:.0f} / {second.cpu_s:.0f}"),
        (
            "second start tokenized?",
            second_start_check(second) or "no: memory-mapped, tokenizer cached",
        ),
        ("peak RSS, first start (build included), MB", f"{first.peak_rss_mb:.0f}"),
        (f"peak RSS, {corpus_mb:.0f} MB corpus (second start), MB", f"{second.peak_rss_mb:.0f}"),
        ("peak RSS, tiny Shakespeare (cache built), MB", f"{small.peak_rss_mb:.0f}"),
        ("peak RSS difference, MB", f"{difference:+.0f} ({within} {RSS_BUDGET_MB} MB)"),
    ]
    print(f"\n`{command_line()}`\n")
    print(
        f"{machine()}; load average {loads[0]:.2f} before, {loads[1]:.2f} after "
        "(other work shares the machine: times are upper bounds)\n"
    )
    print("| figure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    print(f"\ncache: {cache_path}")


def warm_starts(corpus: Path, out: Path, cache: Path, steps: int) -> None:
    """Two second starts on a cache built before: each must neither encode nor fit anything."""
    if not (cache / "tokens").is_dir():
        sys.exit(f"--warm: {cache} holds no token cache; run once without --warm first")
    load = os.getloadavg()[0]
    print(f"\n`{command_line()}`\n\n{machine()}; load average {load:.2f} before\n")
    print("| start | tokenizer ready / first step / exit, s | CPU s | peak RSS, MB | tokenized? |")
    print("|---|--:|--:|--:|---|")
    for name in ("second-warm-1", "second-warm-2"):
        run = run_train(name, corpus, out, cache, steps)
        tokenizer_at = run.find(TOKENIZER_LINE)[0]
        tokenized = second_start_check(run) or "no: memory-mapped, tokenizer cached"
        print(
            f"| {name} | {milestones(run, tokenizer_at)} | {run.cpu_s:.0f} | "
            f"{run.peak_rss_mb:.0f} | {tokenized} |",
            flush=True,
        )


def milestones(run: Run, tokenizer_at: float) -> str:
    return f"{tokenizer_at:.1f} / {seconds(run.first_step_s)} / {run.wall_s:.1f}"


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--data", type=Path, required=True, help="xfmr's shipped corpora")
    parser.add_argument("--source", type=Path, nargs="+", help=f"default: {DEFAULT_SOURCES}")
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rate-mb", type=int, default=16, help="MB encoded per CPU-second")
    parser.add_argument("--out", type=Path, default=Path("/tmp/xfmr-bench"))
    parser.add_argument(
        "--warm",
        action="store_true",
        help="keep the caches an earlier run of this script built in --out and time only "
        "second starts (twice: the first may still record what later starts reuse)",
    )
    args = parser.parse_args()
    sources = args.source or [args.data / name for name in DEFAULT_SOURCES]
    shakespeare = (args.data / SHAKESPEARE).resolve()
    for path in [*sources, shakespeare]:
        if not path.is_file():
            sys.exit(f"{path}: no such file")
    out = args.out.resolve()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    loads = [os.getloadavg()[0]]

    corpus = out / f"corpus-{args.size_mb}MB-seed{args.seed}.txt"
    started = time.perf_counter()
    reused = generate_corpus(corpus, args.size_mb * MB, sources, args.seed)
    print(
        f"corpus {corpus}: {'reused' if reused else 'generated'} "
        f"in {time.perf_counter() - started:.1f} s",
        flush=True,
    )

    big_cache, small_cache = out / f"cache-{args.size_mb}MB", out / "cache-shakespeare"
    if args.warm:
        warm_starts(corpus, out, big_cache, args.steps)
        return
    runs = {}
    for cache in (big_cache, small_cache):  # cold: nothing tokenized, no tokenizer trained
        shutil.rmtree(cache, ignore_errors=True)
    for name, data, cache in (
        ("first", corpus, big_cache),
        ("second", corpus, big_cache),
        ("shakespeare-build", shakespeare, small_cache),
        ("shakespeare", shakespeare, small_cache),
    ):
        runs[name] = run_train(name, data, out, cache, args.steps)
        print(
            f"{name}: {runs[name].wall_s:.1f} s, peak RSS {runs[name].peak_rss_mb:.0f} MB",
            flush=True,
        )
    loads.append(os.getloadavg()[0])
    rate = encode_rate(corpus, out / "runs" / "first" / "tokenizer.json", args.rate_mb)
    print_table(corpus, reused, runs, rate, loads)
    for name in ("second", "shakespeare"):  # the runs whose memory is compared
        if problem := second_start_check(runs[name]):
            sys.exit(f"{name}: {problem}")


if __name__ == "__main__":
    main()
