"""The Llama line, each family held to its transformers class: Llama 3 (rotary scaled as Llama
3.1), Mistral (a sliding window), Qwen3 (q/k norms, windows by layer) and Gemma 2 (sandwich
norms, scaled embeddings, soft-caps, local and global layers). For each: logits equal to the
transformers class built from the same random weights, both ways, over left-padded rows longer
than the window; the family's experiment exported by `xfmr-export format=hf`, loaded by
transformers with xfmr unimportable; a run started from such a folder; cached generation
equal to the full forward past the window; and the settings a family cannot carry refused,
by name. Nothing is downloaded. Run with `-s` to see the measured differences."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from helpers.models import randomize

transformers = pytest.importorskip("transformers")

from xfmr.interop import hf as interop  # noqa: E402
from xfmr.interop.hf_export import hf_family, to_hf  # noqa: E402
from xfmr.nn.cache import KVCache  # noqa: E402
from xfmr.nn.config import ModelConfig  # noqa: E402
from xfmr.nn.model_keys import differences  # noqa: E402
from xfmr.nn.models import CausalLM  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB, D, HEADS, KV_HEADS, LAYERS, WINDOW = 64, 32, 4, 2, 4, 5
LENGTHS = [14, 11, 6]  # left-padded rows, the longest well past the window
TOLERANCE = 1e-4
STD = 0.2
SHARED = dict(
    vocab_size=VOCAB,
    hidden_size=D,
    intermediate_size=2 * D,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV_HEADS,
    head_dim=D // HEADS,
    max_position_embeddings=64,
    attn_implementation="eager",
)
SLIDING, FULL = "sliding_attention", "full_attention"
# family -> (transformers config class, its settings). Every setting the family maps is away
# from the plain default somewhere here, so that a wrong mapping shows in the logits.
FAMILIES = {
    "llama3": (
        "LlamaConfig",
        dict(
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8,  # short, so scaling turns every pair
            },
        ),
    ),
    "mistral": (
        "MistralConfig",
        dict(
            sliding_window=WINDOW,
            rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
        ),
    ),
    "qwen3": (
        "Qwen3Config",
        dict(
            use_sliding_window=True,
            sliding_window=WINDOW,
            layer_types=[SLIDING, SLIDING, FULL, SLIDING],  # global_every=3
            tie_word_embeddings=True,
        ),
    ),
    "gemma2": (
        "Gemma2Config",
        dict(
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=D // HEADS,
            sliding_window=WINDOW,
            layer_types=[SLIDING, FULL] * 2,
            attn_logit_softcapping=5.0,  # small caps: random scores and logits reach them
            final_logit_softcapping=3.0,
        ),
    ),
}
HF_CLASSES = {
    "llama3": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
}
# What each family's xfmr model must be (beyond the shapes), read from the HF config.
EXPECTED = {
    "llama3": dict(bias=True, pos_rope_scaling="llama3", tie_embeddings=False),
    "mistral": dict(bias=False, window=WINDOW, global_every=None, pos_rope_scaling="linear"),
    "qwen3": dict(qk_norm="rmsnorm", window=WINDOW, global_every=3, tie_embeddings=True),
    "gemma2": dict(
        placement="sandwich",
        embed_scale=True,
        activation="geglu_tanh",
        window=WINDOW,
        global_every=2,
        attn_softcap=5.0,
        logit_softcap=3.0,
    ),
}


def _hf(family: str, **overrides) -> nn.Module:
    """The family's transformers model, built offline, every weight redrawn."""
    config_class, settings = FAMILIES[family]
    config = getattr(transformers, config_class)(**{**SHARED, **settings, **overrides})
    return randomize(getattr(transformers, HF_CLASSES[family])(config), std=STD)


def _inputs(lengths: list[int] = LENGTHS, *, seed: int = 1) -> tuple[torch.Tensor, ...]:
    """Random ids (B, T), left-padded; the mask (1 = real) and each token's position."""
    generator = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.randint(0, VOCAB, (len(lengths), T), generator=generator)
    mask = (torch.arange(T)[None, :] >= T - torch.tensor(lengths)[:, None]).long()  # (B, T)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions


def _hf_logits(hf_model: nn.Module, ids, mask, positions) -> torch.Tensor:
    return hf_model(ids, attention_mask=mask, position_ids=positions).logits  # (B, T, V)


def _diff(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor) -> float:
    return (ours - theirs).abs()[mask.bool()].max().item()


@pytest.mark.parametrize("family", sorted(FAMILIES))
@torch.no_grad()
def test_from_hf_gives_the_transformers_logits(family: str) -> None:
    """HF -> xfmr: the checkpoint's config read as the family's settings, every weight copied."""
    hf_model = _hf(family)
    model = interop.from_hf(hf_model)
    flat = model.config.flat()
    for key, value in EXPECTED[family].items():
        assert flat[key.replace("pos_", "pos.")] == value, key
    assert model.config.n_kv_heads == KV_HEADS
    ids, mask, positions = _inputs()
    theirs = _hf_logits(hf_model, ids, mask, positions)
    diff = _diff(model(ids, mask, positions=positions), theirs, mask)
    largest = theirs.abs().max()
    print(f"\n[family] {family} HF -> xfmr: max |xfmr - HF| = {diff:.2e} (max |HF| {largest:.1f})")
    assert diff < TOLERANCE


@pytest.mark.parametrize("family", sorted(FAMILIES))
@torch.no_grad()
def test_to_hf_gives_the_xfmr_logits(family: str) -> None:
    """xfmr -> HF: a model of the family's settings, its own random weights, offered to every
    family, is taken by its own class, and that class computes its logits."""
    config = interop.config_from_hf(_hf(family).config)
    model = randomize(CausalLM(config), std=STD, seed=3)
    chosen = hf_family(model)
    assert chosen.hf_class == HF_CLASSES[family]
    hf_model = to_hf(model, chosen)
    assert type(hf_model).__name__ == HF_CLASSES[family]
    ids, mask, positions = _inputs(seed=2)
    ours = model(ids, mask, positions=positions)
    diff = _diff(ours, _hf_logits(hf_model, ids, mask, positions), mask)
    print(f"\n[family] {family} xfmr -> HF: max |xfmr - HF| = {diff:.2e}")
    assert diff < TOLERANCE


@pytest.mark.parametrize("family", sorted(FAMILIES))
@torch.no_grad()
def test_a_saved_checkpoint_loads_as_init_from_hf_reads_it(family: str, tmp_path: Path) -> None:
    """What `init_from=hf:PATH` does with a folder (its config, then `load_into` a fresh model),
    for each family's `save_pretrained` folder: the model computes the checkpoint's logits."""
    hf_model = _hf(family)
    hf_model.save_pretrained(tmp_path)
    model = CausalLM(interop.hf_model_config(tmp_path)).eval()
    report = interop.load_into(model, tmp_path)
    assert report.skipped == [] and report.new == []
    ids, mask, positions = _inputs()
    theirs = _hf_logits(hf_model, ids, mask, positions)
    assert _diff(model(ids, mask, positions=positions), theirs, mask) < TOLERANCE


# --- cached generation past the window ---------------------------------------------------------


@pytest.mark.parametrize("family", ["mistral", "gemma2"])
@torch.no_grad()
def test_cached_generation_equals_the_full_forward_past_the_window(family: str) -> None:
    """Decoding step by step from a KV cache that keeps only each window gives the full
    forward's logits, 3 windows long; greedy generation with the cache, without it, and
    transformers' own `generate` pick the same tokens."""
    from xfmr.generation.config import GenerationConfig
    from xfmr.generation.search import generate

    hf_model = _hf(family)
    model = interop.from_hf(hf_model)
    ids = torch.randint(0, VOCAB, (2, 3 * WINDOW), generator=torch.Generator().manual_seed(4))
    full = model(ids)
    cache = KVCache()
    steps = [model(ids[:, : WINDOW + 1], cache=cache)]  # a prefill longer than the window
    steps += [model(ids[:, t : t + 1], cache=cache) for t in range(WINDOW + 1, ids.size(1))]
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-5
    prompt, new = ids[:1, :3], 3 * WINDOW

    def greedy(use_cache: bool) -> list[int]:
        config = GenerationConfig(strategy="greedy", max_new_tokens=new, use_cache=use_cache)
        return generate(model, prompt, config=config, eos_id=None, pad_id=0)[0][0].tokens

    theirs = hf_model.generate(
        prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0
    )[0, prompt.size(1) :].tolist()
    assert greedy(True) == greedy(False) == theirs


# --- refusals ----------------------------------------------------------------------------------

LLAMA = dict(pos={"name": "rotary"}, norm="rmsnorm", activation="swiglu", bias=False)
GEMMA2 = dict(
    LLAMA,
    placement="sandwich",
    activation="geglu_tanh",
    embed_scale=True,
    window=8,
    global_every=2,
    attn_softcap=50.0,
    logit_softcap=30.0,
)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(LLAMA, bias=True, window=8), r"LlamaForCausalLM differs in window=8"),
        (dict(LLAMA, attn_softcap=50.0), r"LlamaForCausalLM differs in attn_softcap=50.0"),
        (dict(LLAMA, logit_softcap=30.0), r"LlamaForCausalLM differs in logit_softcap=30.0"),
        (dict(LLAMA, placement="sandwich"), r"LlamaForCausalLM differs in placement='sandwich'"),
        (
            dict(LLAMA, window=8, global_every=2),
            r"MistralForCausalLM differs in global_every=2",
        ),
        (dict(LLAMA, window=8, bias=True), r"MistralForCausalLM differs in bias=True"),
        (dict(LLAMA, qk_norm="layernorm"), r"Qwen3ForCausalLM differs in qk_norm='layernorm'"),
        (dict(LLAMA, qk_norm="rmsnorm", bias=True), r"Qwen3ForCausalLM differs in bias=True"),
        (dict(GEMMA2, placement="pre"), r"Gemma2ForCausalLM differs in placement='pre'"),
        (dict(GEMMA2, embed_scale=False), r"Gemma2ForCausalLM differs in embed_scale=False"),
        (dict(GEMMA2, qk_norm="rmsnorm"), r"Gemma2ForCausalLM differs in qk_norm='rmsnorm'"),
    ],
)
def test_a_setting_the_family_cannot_carry_is_refused_by_name(settings, message) -> None:
    config = ModelConfig.from_dict({"vocab_size": 40, "d_model": 16, "n_heads": 2, **settings})
    with pytest.raises(ValueError, match=f"matches no Hugging Face class exactly: .*{message}"):
        hf_family(CausalLM(config))


@pytest.mark.parametrize(
    ("family", "overrides", "field"),
    [
        ("llama3", dict(head_dim=16), "head_dim=16"),
        ("llama3", dict(rope_parameters={"rope_type": "yarn", "factor": 2.0}), "rope_type='yarn'"),
        ("mistral", dict(head_dim=4), "head_dim=4"),
        ("qwen3", dict(attention_bias=True), "attention_bias=True"),
        ("qwen3", dict(layer_types=[FULL, FULL, SLIDING, SLIDING]), "layer_types="),
        ("gemma2", dict(query_pre_attn_scalar=16), "query_pre_attn_scalar=16"),
        ("gemma2", dict(layer_types=[FULL, SLIDING] * 2), "layer_types="),
        ("gemma2", dict(hidden_activation="relu"), "hidden_activation='relu'"),
    ],
)
def test_a_checkpoint_setting_xfmr_cannot_reproduce_is_refused_by_name(
    family: str, overrides: dict, field: str
) -> None:
    config_class, settings = FAMILIES[family]
    config = getattr(transformers, config_class)(**{**SHARED, **settings, **overrides})
    with pytest.raises(ValueError, match=field):
        interop.config_from_hf(config)


# --- xfmr-export format=hf, and back -----------------------------------------------------------

EXPERIMENTS = {"llama3": "llama3", "mistral": "mistral", "qwen3": "qwen3", "gemma2": "gemma2"}
# Loads each exported folder with transformers alone: importing xfmr fails in this process.
LOAD_WITHOUT_XFMR = textwrap.dedent(
    """
    import json, sys
    sys.modules["xfmr"] = None  # `import xfmr` raises ImportError from here on
    import torch, transformers
    folders, ids, mask, out = json.loads(sys.argv[1])
    ids, mask = torch.tensor(ids), torch.tensor(mask)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = {}
    for name, folder in folders.items():
        model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
        with torch.no_grad():
            found = model(ids, attention_mask=mask, position_ids=positions).logits
        logits[name] = (type(model).__name__, found)
    assert not any(m == "xfmr" or m.startswith("xfmr.") for m in sys.modules if sys.modules[m])
    torch.save(logits, out)
    """
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """family -> (the LoadedRun of its experiment trained 2 steps, shrunk, and its HF folder)."""
    from helpers.config import compose_config
    from xfmr.runs.export_hf import export_hf
    from xfmr.runs.loading import load_run
    from xfmr.training.run import run_training

    done: dict[str, tuple] = {}

    def get(family: str):
        if family not in done:
            root = tmp_path_factory.mktemp(family)
            overrides = [f"experiment={EXPERIMENTS[family]}", "trainer.enable_model_summary=false"]
            run_training(compose_config(root, overrides))
            result = export_hf(root / "run", root / "hf")
            assert result["hf_class"] == HF_CLASSES[family]
            done[family] = (load_run(root / "run"), root / "hf")
        return done[family]

    return get


def _long_rows(run, lengths: tuple[int, ...] = (40, 23)) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded rows of the run's vocabulary, the longest past every window (32 at most)."""
    generator = torch.Generator().manual_seed(5)
    T = max(lengths)
    ids = torch.randint(0, run.model_config.vocab_size, (len(lengths), T), generator=generator)
    mask = (torch.arange(T)[None, :] >= T - torch.tensor(lengths)[:, None]).long()
    return ids, mask


@pytest.mark.slow
@torch.no_grad()
def test_each_export_loads_in_transformers_without_xfmr_and_gives_its_logits(
    exported, tmp_path: Path
) -> None:
    folders, runs = {}, {}
    for family in sorted(FAMILIES):
        runs[family], folder = exported(family)
        folders[family] = str(folder)
        config = json.loads((folder / "config.json").read_text())
        assert config["architectures"] == [HF_CLASSES[family]]
        assert config["head_dim"] == config["hidden_size"] // config["num_attention_heads"]
    ids, mask = _long_rows(runs["llama3"])  # the char vocabularies are the same corpus's
    out = tmp_path / "logits.pt"
    argument = json.dumps([folders, ids.tolist(), mask.tolist(), str(out)])
    result = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_XFMR, argument],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    loaded = torch.load(out, weights_only=False)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    for family, run in runs.items():
        hf_class, theirs = loaded[family]
        assert hf_class == HF_CLASSES[family]
        diff = _diff(run.model(ids, mask, positions=positions), theirs, mask)
        print(f"\n[export] {family}: max |xfmr - HF| = {diff:.2e}")
        assert diff < TOLERANCE


@pytest.mark.slow
@torch.no_grad()
def test_init_from_a_gemma2_export_starts_from_the_run(exported, tmp_path: Path) -> None:
    """`init_from=hf:PATH` on the exported Gemma 2 folder: every tensor is the run's, and the
    new run computes the run's logits (lr 0, one step)."""
    from helpers.config import compose_config
    from xfmr.runs.loading import load_run
    from xfmr.training.run import run_training

    run, folder = exported("gemma2")
    overrides = [
        "experiment=gemma2",
        f"init_from=hf:{folder}",
        "optim.lr=0.0",
        "trainer.max_steps=1",
        "trainer.enable_model_summary=false",
    ]
    results = run_training(compose_config(tmp_path, overrides))
    assert results["init_from"]["new"] == [] and results["init_from"]["skipped"] == []
    started = load_run(tmp_path / "run")
    # Rotary reads no table: the export writes max_position_embeddings 8192 for the run's null.
    unread = frozenset({"pos.max_positions"})
    assert differences(started.model_config, run.model_config, ignore=unread) == []
    ids, mask = _long_rows(run)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    ours = run.model(ids, mask, positions=positions)
    assert _diff(started.model(ids, mask, positions=positions), ours, mask) < TOLERANCE
