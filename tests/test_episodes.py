"""Multi-turn episodes: token arrays, masks, logprobs and versions aligned with what the trainer
recomputes; budgets; the runner keeping groups in flight; a real HF Qwen2 folder with its
tool-calling chat template, against transformers' own rendering of the same conversation."""

from __future__ import annotations

import dataclasses
import random
import string
import threading

import pytest
import torch
from tokenizer_builders import QWEN25_CONFIG, qwen2_style, write_folder

from tempering.agent.format import tool_format
from tempering.agent.parsers import compact
from tempering.rollout.group_key import GroupKey
from tempering.tasks.host import WorkspaceHost
from tempering.config import RewardConfig
from tempering.engine import LLM, SamplingParams
from tempering.models import Arch, build_model
from tempering.records import Budget, Environment, Task, ToolCall
from tempering.reward import RewardService
from tempering.rollout import Episode, EpisodeRunner
from tempering.rollout.episode import replay
from tempering.tasks import get_domain
from tempering.tokenizer import char_tokenizer, load_tokenizer
from tempering.trainer import token_logprobs
from tempering.trainer.sft import sft_batch

FILES = get_domain("files")
TOK = char_tokenizer(FILES.alphabet + string.printable)


def files_task(seed=0, **budget) -> Task:
    task = FILES.make(random.Random(seed))
    return dataclasses.replace(task, id=f"files-{seed}", budget=dataclasses.replace(task.budget, **budget))


def episode(task, fmt=None, max_seq_len=512, max_tokens=64) -> Episode:
    fmt = fmt or tool_format("compact", TOK)
    files = {n: t.encode() for n, t in task.environment.files}
    return Episode(task, 0, TOK.encode_prompt(task.prompt), max_tokens, max_seq_len, fmt.parse, fmt.renderer,
                   WorkspaceHost(files))


def test_a_replayed_episode_reads_the_file_and_answers():
    task = files_task()
    target = task.prompt[len("sort @"):-1]
    ep = replay(episode(task), task.reference_turns, TOK)
    t = ep.trajectory("")
    assert t.finish_reason == "stop" and [x.role for x in t.turns] == ["assistant", "tool", "assistant"]
    (call,) = t.turns[0].tool_calls
    assert call.name == "read" and call.output == dict(task.environment.files)[target]
    obs = t.token_ids[t.turns[1].start: t.turns[1].end]
    assert TOK.decode(obs) == f">{call.output}\n"  # the digits exist only in the observation, not the prompt
    assert call.output not in TOK.decode(t.prompt_ids)
    # model tokens: mask 1; the observation: mask 0, logprob 0, version -1
    for x in t.turns:
        span = range(x.start, x.end)
        assert {t.loss_mask[i] for i in span} == {1 if x.role == "assistant" else 0}
        if x.role == "tool":
            assert {t.versions[i] for i in span} == {-1} and {t.logprobs[i] for i in span} == {0.0}
    assert TOK.decode(t.answer_ids) == task.answer
    # SFT trains on the model's turns only
    batch = sft_batch(TOK, [task], tool_format("compact", TOK))
    p = len(t.prompt_ids)
    assert batch.loss_mask[0, p: p + len(t.token_ids)].tolist() == [float(m) for m in t.loss_mask]


def test_malformed_and_unknown_calls_are_observations_and_the_episode_goes_on():
    task = files_task(max_turns=4)
    ep = replay(episode(task), ["$", "$rm a", "$read zz", task.reference_turns[0]], TOK)
    assert ep.finish_reason == "max_turns"  # four turns were its budget; the call on the last is carried out
    kinds = [c.error_kind for x in ep.turns for c in x.tool_calls]
    assert kinds == ["malformed", "unknown_tool", "tool", ""]
    observed = TOK.decode(ep.token_ids[ep.turns[1].start: ep.turns[1].end])
    assert observed.startswith(">error: malformed tool call")
    # after a malformed call the model can still do it right
    ep = replay(episode(task), ["$", *task.reference_turns], TOK)
    assert ep.finish_reason == "stop" and TOK.decode(ep.trajectory("").answer_ids) == task.answer


def test_budgets_end_episodes_with_their_own_reasons():
    task = files_task()
    # the model keeps calling tools: max_turns
    ep = replay(episode(task), ["$read a", "$read b", "$read c"], TOK)
    assert ep.finish_reason == "max_turns" and ep.num_assistant_turns == 3
    # its token budget: the next turn gets what is left, then the episode ends as "length"
    ep = replay(episode(files_task(max_tokens=8)), ["$read a"], TOK)
    assert ep.next_turn_tokens() == 8 - len(TOK.encode("$read a")) - 1
    # the context: an observation that would leave no room for the next turn ends it as "context"
    short = episode(task, max_seq_len=len(TOK.encode_prompt(task.prompt)) + 10)
    replay(short, ["$read a"], TOK)
    assert short.finish_reason == "context" and short.turns[-1].role == "assistant"
    # a turn cut off by its token limit ends the episode as "length"
    ep = episode(task)
    assert ep.add_turn(TOK.encode("$rea"), [0.0] * 4, [0] * 4, "length", "$rea") == []
    assert ep.finish_reason == "length"
    with pytest.raises(ValueError, match="after the episode ended"):
        replay(episode(task), ["12", "34"], TOK)


# ---------------------------------------------------------------------------------------------
# The runner on a real engine


def always_read(text: str) -> list[ToolCall]:
    """A scripted environment: every model turn calls `read` (the random model cannot)."""
    return [ToolCall("read", {"path": "a"})]


def runner(model, parse=always_read, workers=2, tok=TOK):
    fmt = tool_format("compact", tok)
    reward = RewardService(RewardConfig(), tok)

    def open_hosts(task, n, key):
        return [WorkspaceHost({"a": b"4721"}) for _ in range(n)]

    return EpisodeRunner(LLM(model, tok, max_seq_len=256), tok, reward, parse, fmt.renderer, open_hosts,
                         lambda h: None, workers), reward


def tool_task(i=0, turns=3) -> Task:
    return Task(id=f"t{i}", domain="files", prompt="sort @a=", answer="1247",
                tools=("read",), environment=Environment(files=(("a", "4721"),)),
                budget=Budget(max_turns=turns, max_tokens=60))


@pytest.fixture(scope="module")
def model():
    arch = Arch(vocab_size=TOK.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    return build_model(arch, seed=0).eval()


def test_engine_episodes_align_logprobs_masks_and_versions_with_the_trainer(model):
    run, reward = runner(model)
    # A random model rarely samples eos: let any letter end a turn, so turns end as "stop".
    letters = tuple(TOK.inner.token_to_id(c) for c in string.ascii_letters)
    params = SamplingParams(temperature=1.0, max_tokens=8, seed=3, stop_token_ids=letters)
    group = run.run_group(tool_task(turns=3), 4, params, max_tokens=60)
    run.close()
    reward.close()
    for t in group.trajectories:
        assert t.finish_reason == "max_turns" and [x.role for x in t.turns] == ["assistant", "tool"] * 2 + ["assistant"]
        ids = torch.tensor([t.prompt_ids + t.token_ids])
        with torch.no_grad():
            ref, _ = token_logprobs(model, ids)
        ref = ref[0, len(t.prompt_ids) - 1:]
        mask = torch.tensor(t.loss_mask, dtype=torch.bool)
        # every model token's logprob is the trainer's over the whole multi-turn context
        torch.testing.assert_close(torch.tensor(t.logprobs)[mask], ref[mask], atol=1e-4, rtol=0)
        assert all(v == 0 for v, m in zip(t.versions, t.loss_mask) if m)
        assert all(v == -1 and lp == 0.0 for v, lp, m in zip(t.versions, t.logprobs, t.loss_mask) if not m)
        for x in t.turns:
            if x.role == "tool":
                assert TOK.decode(t.token_ids[x.start: x.end]) == ">4721\n"


class SlowHost(WorkspaceHost):
    """A workspace whose reads wait for a release: the slow sandbox call of one group."""

    def __init__(self, release: threading.Event):
        super().__init__({"a": b"4721"})
        self.release = release

    def read_file(self, path):
        assert self.release.wait(60)
        return super().read_file(path)


def test_a_slow_tool_call_holds_back_only_its_own_group(model):
    release = threading.Event()
    fmt = tool_format("compact", TOK)
    reward = RewardService(RewardConfig(), TOK)

    def open_hosts(task, n, key):
        return [SlowHost(release) if task.id == "slow" else WorkspaceHost({"a": b"4721"}) for _ in range(n)]

    run = EpisodeRunner(LLM(model, TOK, max_seq_len=256), TOK, reward, always_read, fmt.renderer, open_hosts,
                        lambda h: None, workers=4)
    params = SamplingParams(temperature=1.0, max_tokens=6, seed=1)
    run.start(dataclasses.replace(tool_task(), id="slow"), 2, params, 40, GroupKey("slow"))
    run.start(dataclasses.replace(tool_task(), id="fast"), 2, params, 40, GroupKey("fast"))
    done = []
    for _ in range(10_000):
        done += [key.source for key, _ in run.poll(0.01)]
        if "fast" in done:
            break
    assert done == ["fast"]  # scored while the slow group's tool call is still running
    release.set()
    while run.busy:
        done += [key.source for key, _ in run.poll(0.01)]
    assert done == ["fast", "slow"]
    run.close()
    reward.close()


# ---------------------------------------------------------------------------------------------
# A real HF folder: tiny random Qwen2, BPE tokenizer, Qwen2.5's tool-calling template

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory):
    folder = write_folder(tmp_path_factory.mktemp("qwen") / "m", qwen2_style(), QWEN25_CONFIG)
    tok = load_tokenizer(folder)
    cfg = transformers.Qwen2Config(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                   max_position_embeddings=2048, tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(cfg).save_pretrained(folder)
    return folder


def test_hermes_episode_tokens_are_the_templates_rendering_of_the_conversation(qwen_folder):
    """The ids Tempering trains on equal transformers' apply_chat_template of the same
    conversation: tool results appended as tokens never drift from the template."""
    from tempering.agent.tools import tool_schemas

    tok, hf = load_tokenizer(qwen_folder), transformers.AutoTokenizer.from_pretrained(str(qwen_folder))
    fmt = tool_format("auto", tok)
    assert fmt.name == "hermes"
    task = Task(id="q", domain="files", prompt="", answer="1247", tools=("read",),
                messages=(), budget=Budget(max_turns=3, max_tokens=200))
    from tempering.records import Message

    task = dataclasses.replace(task, messages=(Message("user", "Sort the digits in a."),))
    schemas = tool_schemas(task)
    turns = ['<tool_call>\n{"name": "read", "arguments": {"path": "a"}}\n</tool_call>', "1247"]
    ep = Episode(task, 0, tok.encode_prompt("", task.messages, schemas), 200, 4096, fmt.parse, fmt.renderer,
                 WorkspaceHost({"a": b"4721"}))
    replay(ep, turns, tok)
    messages = [{"role": "user", "content": "Sort the digits in a."}, {"role": "assistant", "content": turns[0]},
                {"role": "tool", "content": "4721"}, {"role": "assistant", "content": turns[1]}]
    expected = hf.apply_chat_template(messages, tools=schemas, tokenize=True, return_dict=True)["input_ids"]
    got = ep.prompt_ids + ep.token_ids
    assert got == list(expected)[:len(got)] and hf.decode(list(expected)[len(got):]) == "\n"  # its trailing newline
    assert ep.finish_reason == "stop" and tok.decode(ep.trajectory("").answer_ids) == "1247"


def test_the_runner_drives_a_real_hf_folder_with_its_chat_template(qwen_folder):
    from tempering.models import load_hf

    tok, hf = load_tokenizer(qwen_folder), transformers.AutoTokenizer.from_pretrained(str(qwen_folder))
    from tempering.records import Message

    task = Task(id="q", domain="files", prompt="", answer="1247", tools=("read",),
                messages=(Message("user", "Sort the digits in a."),), environment=Environment(files=(("a", "4721"),)),
                budget=Budget(max_turns=2, max_tokens=40))
    reward = RewardService(RewardConfig(), tok)
    run = EpisodeRunner.build(LLM(load_hf(qwen_folder), tok, max_seq_len=2048, max_batch_size=8), tok, reward)
    group = run.run_group(task, 3, SamplingParams(temperature=1.0, max_tokens=40, seed=0), 40)
    run.close()
    reward.close()
    from tempering.agent.tools import tool_schemas

    hf_prompt = hf.apply_chat_template([{"role": "user", "content": "Sort the digits in a."}], tools=tool_schemas(task),
                                       add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    for t in group.trajectories:
        assert t.prompt_ids == list(hf_prompt)
        assert t.finish_reason in ("stop", "length", "max_turns")  # a random model: any end, never a crash
    assert all(not r.failed for r in group.rewards)
