import pytest

from tempering.config import Config, ConfigError, load_config


def write(tmp_path, text):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_defaults_and_overrides(tmp_path):
    p = write(tmp_path, "[trainer]\nlr = 0.001\n[tasks]\nweights = { arithmetic = 2.0 }\n")
    cfg = load_config(p, ["--trainer.lr=5e-4", "--run.name=abc", "--tasks.weights.strings=1", "--buffer.max_staleness=0"])
    assert cfg.trainer.lr == 5e-4 and cfg.run.name == "abc" and cfg.buffer.max_staleness == 0
    assert cfg.tasks.weights == {"arithmetic": 2.0, "strings": 1.0}
    assert isinstance(cfg, Config)
    with pytest.raises(Exception):
        cfg.trainer.lr = 1.0  # frozen


@pytest.mark.parametrize("text, words", [
    ("[trainr]\nlr = 1\n", ["c.toml", "trainr", "unknown key"]),
    ("[trainer]\nlrr = 1\n", ["c.toml", "trainer.lrr", "unknown key"]),
    ("[trainer]\nlr = 'fast'\n", ["c.toml", "trainer.lr", "a number", "'fast'"]),
    ("[trainer]\nlr = -1.0\n", ["c.toml", "trainer.lr", "> 0", "-1.0"]),
    ("[rollout]\nsamples_per_task = 1.5\n", ["rollout.samples_per_task", "an integer"]),
    ("[metrics]\ntensorboard = 1\n", ["metrics.tensorboard", "true or false"]),
    ("[sandbox]\nbackend = 'docker'\n", ["sandbox.backend", "one of"]),
    ("[model]\nhidden_size = 100\nnum_attention_heads = 3\n", ["model.hidden_size", "multiple"]),
    ("[tasks]\nweights = { code = -1 }\n", ["tasks.weights.code", "weight > 0"]),
    ("trainer = 3\n", ["trainer", "table"]),
    ("[trainer]\nlr = nan\n", ["trainer.lr", "a finite number"]),
    ("[tasks]\nweights = { code = inf }\n", ["tasks.weights.code", "a finite number"]),
    ("[run]\nname = '..'\n", ["run.name", "folder name"]),
    ("[run]\nname = 'a/b'\n", ["run.name", "folder name"]),
    ("[trainer\nlr=1", ["c.toml", "not valid TOML"]),
])
def test_bad_files_name_file_key_and_expectation(tmp_path, text, words):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.parametrize("override, words", [
    ("--trainer.lrr=1", ["command line", "lrr", "unknown key"]),
    ("--nosuch.key=1", ["command line", "nosuch"]),
    ("--trainer.lr=abc", ["command line", "trainer.lr", "a number"]),
    ("trainer.lr=1", ["--section.key=value"]),
    ("--trainer=1", ["section and a key"]),
])
def test_bad_overrides(override, words):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_missing_file():
    with pytest.raises(ConfigError, match="no such config file"):
        load_config("does/not/exist.toml")


def test_shipped_configs_load():
    from pathlib import Path

    shipped = sorted(Path(__file__).parent.parent.glob("configs/*.toml"))
    assert {p.name for p in shipped} >= {"demo.toml", "many_domains.toml"}
    for p in shipped:
        load_config(p)


def test_choices_are_checked_when_sections_are_built_in_code():
    from tempering.config import EngineConfig, TrainerConfig

    with pytest.raises(ConfigError, match="engine.attention: expected one of 'sdpa', 'flex', got 'flx'"):
        EngineConfig(attention="flx")
    with pytest.raises(ConfigError, match="trainer.schedule"):
        TrainerConfig(schedule="linear")


def test_runtime_section_defaults_and_checks():
    cfg = load_config(None, ["--runtime.kind=ray", "--runtime.address=10.0.0.1:6379", "--runtime.replicas=2",
                             "--runtime.replica_resources={ engine = 1 }"])
    r = cfg.runtime
    assert (r.kind, r.address, r.replicas, r.replica_resources) == ("ray", "10.0.0.1:6379", 2, {"engine": 1.0})
    assert load_config().runtime.kind == "local" and load_config().runtime.replicas == 1
    for override, words in (("--runtime.kind=slurm", "runtime.kind: expected one of 'local', 'ray'"),
                            ("--runtime.replicas=0", "runtime.replicas: expected an integer >= 1"),
                            ("--runtime.replica_resources={ CPU = 1 }", "runtime.replica_resources.CPU"),
                            ("--runtime.trainer_resources={ GPU = 1 }", "runtime.trainer_resources.GPU: expected an "
                             "amount > 0 of a custom resource"),
                            ("--runtime.trainer_resources={ trainer = 0 }", "runtime.trainer_resources.trainer"),
                            ("--runtime.nodes=3", "runtime.nodes: unknown key"),
                            ("--runtime.checkpoint_format=dcp", "runtime.checkpoint_format: expected one of 'full'"),
                            ("--runtime.checkpoint_format=sharded", "runtime.checkpoint_format: expected 'full' when "
                             "runtime.trainer_ranks is 1"),
                            ("--runtime.max_replicas=3", "runtime.max_replicas: expected at most runtime.replicas on "
                             "the local runtime")):
        with pytest.raises(ConfigError, match=words):
            load_config(None, [override])
    assert load_config().runtime.checkpoint_format == "full"
    with pytest.raises(ConfigError, match=r"runtime.max_replicas: expected 0 \(fixed\) or an integer >= runtime.replicas \(2\)"):
        load_config(None, ["--runtime.kind=ray", "--runtime.replicas=2", "--runtime.max_replicas=1"])
    assert load_config(None, ["--runtime.kind=ray", "--runtime.max_replicas=4"]).runtime.max_replicas == 4
    assert load_config(None, ["--runtime.trainer_ranks=2", "--runtime.checkpoint_format=sharded"]
                       ).runtime.checkpoint_format == "sharded"


def test_elastic_replicas_bounds_say_what_is_expected():
    """runtime.min_replicas: at most the count a run starts with, and below the maximum."""
    for overrides, words in (
            (["--runtime.kind=ray", "--runtime.replicas=1", "--runtime.min_replicas=2", "--runtime.max_replicas=3"],
             r"runtime.min_replicas: expected 0 \(off\) or at most runtime.replicas \(1\)"),
            (["--runtime.kind=ray", "--runtime.replicas=2", "--runtime.min_replicas=2", "--runtime.max_replicas=2"],
             r"runtime.min_replicas: expected 0 \(off\) or below runtime.max_replicas .*: 2\), so that there is a range"),
            (["--runtime.min_replicas=1"], r"runtime.min_replicas: expected .* below runtime.max_replicas"),
            (["--runtime.scale_up_wait=0"], r"runtime.scale_up_wait: expected a number in \(0, 1\]"),
            (["--runtime.scale_patience=0"], r"runtime.scale_patience: expected an integer >= 1")):
        with pytest.raises(ConfigError, match=words):
            load_config(None, overrides)
    ray = load_config(None, ["--runtime.kind=ray", "--runtime.replicas=2", "--runtime.min_replicas=1",
                             "--runtime.max_replicas=4"]).runtime
    assert (ray.min_replicas, ray.replicas, ray.max_replicas) == (1, 2, 4)
    # the local runtime drains and restarts processes up to the count it started with
    assert load_config(None, ["--runtime.replicas=2", "--runtime.min_replicas=1"]).runtime.min_replicas == 1


@pytest.mark.parametrize("old, new", [("grpo", ["ppo", "seq_mean_token_mean"]), ("drgrpo", ["ppo", "seq_sum_const"]),
                                      ("dapo", ["ppo", "token_mean"])])
def test_a_replaced_value_says_what_replaced_it_and_that_works(tmp_path, old, new):
    path = tmp_path / "old.toml"
    path.write_text(f'[algorithm]\nloss = "{old}"\n')
    with pytest.raises(ConfigError) as e:
        load_config(path)
    message = str(e.value)
    assert f"unknown '{old}'" in message and f'loss = "{new[0]}"' in message and f'aggregation = "{new[1]}"' in message
    path.write_text(f'[algorithm]\nloss = "{new[0]}"\naggregation = "{new[1]}"\n')
    cfg = load_config(path)
    assert (cfg.algorithm.loss, cfg.algorithm.aggregation) == tuple(new)
    with pytest.raises(ConfigError, match=r"unknown 'nope' \(known: cispo, gspo, ppo\)$"):
        load_config(None, ["--algorithm.loss=nope"])
