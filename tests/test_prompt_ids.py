"""Prompt ids against `transformers` itself: a Llama-style tokenizer whose post-processor adds BOS
and a Qwen2-style one without, built locally; chat templates; one BOS at most; and a checkpoint
trained with BOS that scores the same greedy accuracy under Tempering's evaluation as under
`transformers.generate`."""

from __future__ import annotations

import json
import time

import pytest
import torch
from tokenizer_builders import LLAMA3_CONFIG, QWEN2_CONFIG, llama3_style, qwen2_style, write_folder
from tokenizers import processors

from tempering.records import Message
from tempering.tokenizer import Tokenizer, char_tokenizer, load_tokenizer

transformers = pytest.importorskip("transformers")

PROMPTS = ["hello world", "sort 4721=", " leading space and\ttab", "Hello  World!\n\nrev abc=", ""]
CONVERSATIONS = [
    [Message("system", "Be brief."), Message("user", "sort 4721=")],
    [Message("user", "rev abc="), Message("assistant", "cba"), Message("user", "  and now hello world  ")],
]


def both(folder):
    return load_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(str(folder))


def hf_chat_ids(hf, conversation) -> list[int]:
    messages = [{"role": m.role, "content": m.content} for m in conversation]
    out = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(out["input_ids"])


def assert_same_ids(ours: Tokenizer, hf) -> None:
    for text in PROMPTS:
        assert ours.encode_prompt(text) == hf(text).input_ids, text
        assert ours.encode(text) == hf(text, add_special_tokens=False).input_ids, text  # raw: no specials
    for conversation in CONVERSATIONS:
        ids = ours.encode_prompt("ignored when there are messages", conversation)
        assert ids == hf_chat_ids(hf, conversation)
        if ours.bos_id is not None:
            assert ids[:2].count(ours.bos_id) <= 1


@pytest.mark.parametrize("style", ["llama3", "qwen2"])
def test_prompt_ids_equal_transformers(tmp_path, style):
    inner, config = (llama3_style(), LLAMA3_CONFIG) if style == "llama3" else (qwen2_style(), QWEN2_CONFIG)
    ours, hf = both(write_folder(tmp_path / "a", inner, config))
    if style == "llama3":
        bos = inner.token_to_id("<|begin_of_text|>")
        assert (ours.bos_id, ours.add_bos_token, ours.prefix_ids, ours.add_eos_token) == (bos, True, [bos], False)
        assert ours.encode_prompt("sort 4721=")[:1] == [bos] and ours.encode("sort 4721=")[:1] != [bos]
        assert hf_chat_ids(hf, CONVERSATIONS[0])[:2] == [bos, inner.token_to_id("<|start_header_id|>")]
    else:
        assert (ours.bos_id, ours.add_bos_token, ours.prefix_ids) == (None, False, [])
        assert ours.encode_prompt("sort 4721=") == ours.encode("sort 4721=")
    assert_same_ids(ours, hf)
    # Saved by Tempering, the folder reloads with the same behaviour in both.
    ours.save(tmp_path / "b")
    assert json.loads((tmp_path / "b" / "tokenizer_config.json").read_text())["add_bos_token"] is (style == "llama3")
    again, hf_again = both(tmp_path / "b")
    assert (again.bos_id, again.add_bos_token, again.prefix_ids) == (ours.bos_id, ours.add_bos_token, ours.prefix_ids)
    assert_same_ids(again, hf_again)
    for text in PROMPTS:
        assert again.encode_prompt(text) == ours.encode_prompt(text)


def test_a_prompt_that_begins_with_bos_gets_no_second_one(tmp_path):
    ours, hf = both(write_folder(tmp_path, llama3_style(), LLAMA3_CONFIG))
    bos = ours.bos_id
    text = "<|begin_of_text|>sort 4721="
    doubled = hf(text).input_ids
    assert doubled[:2] == [bos, bos]  # transformers adds its BOS in front of the text's own
    assert ours.encode_prompt(text) == doubled[1:] == hf(text, add_special_tokens=False).input_ids
    assert ours.encode_prompt(text) == ours.encode_prompt("sort 4721=")
    # The template's bos_token is the only one in a chat prompt, even if a message repeats it.
    ids = ours.encode_prompt("", [Message("user", "<|begin_of_text|>hi")])
    assert ids[0] == bos and ids[1] != bos


@pytest.mark.parametrize("bos_post_processor, add_bos_token", [(True, False), (False, True)])
def test_config_add_bos_token_yields_to_the_post_processor_as_in_transformers(tmp_path, bos_post_processor,
                                                                           add_bos_token):
    """transformers 5 drops tokenizer_config.json's add_bos_token when tokenizer.json is there
    (PreTrainedTokenizerBase._from_pretrained) and keeps the file's post-processor."""
    config = {**LLAMA3_CONFIG, "add_bos_token": add_bos_token, "add_eos_token": add_bos_token}
    ours, hf = both(write_folder(tmp_path, llama3_style(bos_post_processor), config))
    bos = ours.bos_id
    assert (hf("hello world").input_ids[0] == bos) is bos_post_processor
    assert ours.add_bos_token is bos_post_processor and not ours.add_eos_token
    assert_same_ids(ours, hf)


def test_engine_and_server_encode_prompts_as_vllm_does(tmp_path):
    """Text prompts to LLM.generate and /v1/completions get the BOS; chat requests are rendered
    with the template (its own BOS) and encoded without adding specials again."""
    from tempering.engine import LLM, SamplingParams
    from tempering.serve import api
    from tempering.models import Arch, build_model

    ours, hf = both(write_folder(tmp_path, llama3_style(), LLAMA3_CONFIG))
    arch = Arch(vocab_size=ours.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    engine = LLM(build_model(arch), ours)
    params = SamplingParams(max_tokens=4)
    for text in PROMPTS[:-1]:
        assert engine.check(text, params) == hf(text).input_ids
        req = api.parse({"prompt": text}, False, ours)
        assert engine.check(req.prompts[0], req.params) == hf(text).input_ids
    for conversation in CONVERSATIONS:
        body = {"messages": [{"role": m.role, "content": m.content} for m in conversation], "max_tokens": 4}
        req = api.parse(body, True, ours)
        assert engine.check(req.prompts[0], req.params) == hf_chat_ids(hf, conversation)


def test_char_tokenizer_adds_no_bos(tmp_path):
    tok = char_tokenizer("sort 0123456789=")
    assert (tok.add_bos_token, tok.prefix_ids, tok.bos_id) == (False, [], tok.inner.token_to_id("<bos>"))
    assert tok.encode_prompt("sort 4721=") == tok.encode("sort 4721=")
    tok.save(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    ids = tok.encode("sort 4721=")
    assert hf("sort 4721=").input_ids == ids == load_tokenizer(tmp_path).encode_prompt("sort 4721=")


# ---------------------------------------------------------------------------------------------
# A checkpoint trained with BOS: Tempering's evaluation and transformers agree on it.


def bos_char_tokenizer(alphabet: str) -> Tokenizer:
    """The demo's character tokenizer with a post-processor that puts <bos> first."""
    inner = char_tokenizer(alphabet).inner
    inner.post_processor = processors.TemplateProcessing(single="<bos> $A",
                                                         special_tokens=[("<bos>", inner.token_to_id("<bos>"))])
    return Tokenizer(inner, eos_token="<eos>", pad_token="<pad>", bos_token="<bos>")


def hf_greedy(folder, tasks, max_tokens: int) -> tuple[list[list[int]], list[list[int]], float]:
    """Prompt ids, generated ids (eos included) and accuracy as plain transformers gives them,
    judged as the exact_answer verifier judges: ended by eos, no special token inside, the
    decoded answer stripped equal to the task's."""
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    special = set(hf_tok.all_special_ids)
    prompts, outputs, correct = [], [], 0
    for task in tasks:
        ids = hf_tok(task.prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=min(max_tokens, task.budget.max_tokens),
                                 eos_token_id=hf_tok.eos_token_id, pad_token_id=hf_tok.pad_token_id)
        new = out[0, ids.shape[1]:].tolist()
        prompts.append(ids[0].tolist())
        outputs.append(new)
        ended = bool(new) and new[-1] == hf_tok.eos_token_id
        body = new[:-1] if ended else new
        text = hf_tok.decode(body, skip_special_tokens=True).strip()
        correct += ended and not special & set(body) and text == task.answer
    return prompts, outputs, correct / len(tasks)


def test_checkpoint_trained_with_bos_scores_the_same_under_tempering_and_transformers(tmp_path):
    from tempering.config import EngineConfig, RewardConfig, TasksConfig, TrainerConfig
    from tempering.engine import LLM, SamplingParams
    from tempering.evaluation import summarize
    from tempering.models import Arch, build_model, load_hf, save_hf
    from tempering.pool import TaskPool
    from tempering.reward import RewardService
    from tempering.rollout import EpisodeRunner
    from tempering.trainer.sft import sft_warmup
    from tempering.trainer.step import Trainer

    started = time.monotonic()
    pool = TaskPool(TasksConfig(weights={"sorting": 1.0}, eval_per_domain=40, sft_per_domain=2000, seed=7))
    tok = bos_char_tokenizer(pool.alphabet)
    assert tok.add_bos_token
    arch = Arch(vocab_size=tok.vocab_size, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)
    torch.manual_seed(0)
    model = build_model(arch, seed=0)
    trainer = Trainer(model, TrainerConfig(lr=3e-3, micro_batch_tokens=4096))
    sft_warmup(trainer, tok, pool.sft_examples(), steps=150, batch_size=64, seed=0)
    folder = tmp_path / "model"
    save_hf(model, folder)
    tok.save(folder)
    trained_s = time.monotonic() - started

    heldout, max_tokens = pool.heldout(), 8
    ours_tok = load_tokenizer(folder)
    engine = LLM(load_hf(folder), ours_tok, EngineConfig(max_seq_len=64))
    reward = RewardService(RewardConfig(), ours_tok)
    runner = EpisodeRunner.build(engine, ours_tok, reward)
    try:  # Tempering's evaluation: greedy episodes through the rollout's runner, scored by the verifier
        groups = runner.run(heldout, 1, SamplingParams(temperature=0, max_tokens=max_tokens), max_tokens)
    finally:
        runner.close()
        reward.close()
    samples, result = [g.trajectories[0] for g in groups], summarize(heldout, groups)

    hf_prompts, hf_outputs, hf_accuracy = hf_greedy(folder, heldout, max_tokens)
    assert [s.prompt_ids for s in samples] == hf_prompts
    assert all(p[0] == tok.bos_id and p[1] != tok.bos_id for p in hf_prompts)
    assert [s.token_ids for s in samples] == hf_outputs
    assert result.accuracy == pytest.approx(hf_accuracy)
    assert result.accuracy > 0, f"SFT left held-out accuracy at 0 ({trained_s:.1f} s of training)"


@pytest.mark.parametrize("where", ["jinja", "named", "folder", "saved_by_transformers"])
def test_the_chat_template_is_read_where_transformers_reads_it(tmp_path, where):
    """transformers 5 saves the template as chat_template.jinja (not in tokenizer_config.json);
    a config may also name several templates, or keep them in chat_templates/. Either way the
    rendered prompt's ids are transformers' own."""
    from tokenizer_builders import CHATML_TEMPLATE

    config = {k: v for k, v in QWEN2_CONFIG.items() if k != "chat_template"}
    folder = write_folder(tmp_path / "a", qwen2_style(), config)
    if where == "jinja":
        (folder / "chat_template.jinja").write_text(CHATML_TEMPLATE)
    elif where == "named":
        named = [{"name": "tool_use", "template": "{{ 'not this one' }}"}, {"name": "default", "template": CHATML_TEMPLATE}]
        (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": named}))
    elif where == "folder":
        (folder / "chat_templates").mkdir()
        (folder / "chat_templates" / "default.jinja").write_text(CHATML_TEMPLATE)
    else:
        (folder / "chat_template.jinja").write_text(CHATML_TEMPLATE)
        transformers.AutoTokenizer.from_pretrained(str(folder)).save_pretrained(str(tmp_path / "b"))
        folder = tmp_path / "b"
        assert "chat_template" not in json.loads((folder / "tokenizer_config.json").read_text())
    ours, hf = both(folder)
    assert ours.chat_template == CHATML_TEMPLATE
    if where == "folder":  # transformers 5.25 did not pick chat_templates/default.jinja up from this folder
        hf.chat_template = CHATML_TEMPLATE
    for conversation in CONVERSATIONS:
        assert ours.encode_prompt("", conversation) == hf_chat_ids(hf, conversation)
    ours.save(tmp_path / "c")  # written back where transformers 5 reads it first
    assert (tmp_path / "c" / "chat_template.jinja").read_text() == CHATML_TEMPLATE
