"""`tempering serve [MODEL] [--follow RUN_DIR] [--api-key KEY | --keys FILE]`: builds the engine,
the tenants and the weight follower from the command line and the config (`[engine]`, `[serve]`,
and for agent runs `[sandbox]` and `[reward]`), and serves in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
from pathlib import Path

from tempering.errors import UserError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `tempering serve` on the CLI's subparsers."""
    p = subparsers.add_parser("serve", help="serve a model folder over an OpenAI-compatible HTTP API",
                              description="Overrides: --section.key=value of [engine], [serve], [sandbox] and "
                              "[reward], e.g. --engine.kv_dtype=int8 --serve.queue=fifo")
    p.add_argument("model", nargs="?", help="a folder with config.json, model.safetensors and tokenizer.json, or a "
                   ".gguf file (with --follow: default the run's latest checkpoint)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--name", help="the model id clients send (default: the folder's name, or the run's with --follow)")
    p.add_argument("--config", help="TOML config file; its [engine], [serve], [sandbox] and [reward] sections are used")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--api-key", action="append", default=[], metavar="KEY",
                   help="a key of the tenant 'default' (repeatable; default: $TEMPERING_API_KEY); with any key "
                   "set, requests without a valid one get 401")
    p.add_argument("--keys", metavar="FILE", help='a TOML file of API keys: "<key>" = "<tenant>" per line')
    p.add_argument("--follow", metavar="RUN_DIR", help="load each newer checkpoint of a training run as it is written")
    p.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace, overrides: list[str]) -> int:
    import torch

    from tempering.config import load_config
    from tempering.engine.llm_engine import LLM
    from tempering.models import load_hf
    from tempering.models.location import local_model
    from tempering.serve.server import Server
    from tempering.serve.tenants import Tenants
    from tempering.tokenizer import load_tokenizer

    cfg = load_config(args.config, overrides)
    if args.threads:
        torch.set_num_threads(args.threads)
    folder, version, name = _model(args)
    engine = LLM(load_hf(folder), load_tokenizer(folder), cfg.engine, version=version)
    follower = None
    if args.follow:
        from tempering.serve.follow import RunFollower

        follower = RunFollower(args.follow, {k: v.shape for k, v in engine.model.state_dict().items()},
                               cfg.serve.follow_poll_s).start()
    tenants = Tenants.load(cfg.serve, args.api_key, args.keys)
    try:
        server = Server(engine, args.host, args.port, name, cfg.serve, tenants, follower, cfg.sandbox, cfg.reward)
    except OSError as e:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    server.loop.start()
    keys = "open (no API key)" if tenants.open else f"{len(tenants.all())} tenant(s)"
    print(f"[tempering] serving {name} (version {engine.version}) on http://{args.host}:{server.server_address[1]}/v1"
          f", {keys}" + (f", following {args.follow}" if args.follow else ""), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.release()
        if follower is not None:
            follower.close()
    return 0


def _model(args: argparse.Namespace) -> tuple[Path, int, str]:
    """The model folder to start from, its policy version and the name clients send."""
    from tempering.models.location import local_model

    if args.model:
        folder = local_model(args.model)  # a .gguf file is converted once into the cache
        return folder, 0, args.name or Path(args.model).resolve().name
    if not args.follow:
        raise UserError("serve: name a model folder, or a run to follow with --follow RUN_DIR")
    from tempering.trainer.checkpoint import latest_checkpoint
    from tempering.serve.follow import checkpoint_version

    run = Path(args.follow)
    ckpt = latest_checkpoint(run) if run.is_dir() else None
    if ckpt is None:
        raise UserError(f"--follow {run}: no checkpoint yet (checkpoints/latest); name a model folder to start "
                        "from, or wait for the run's first checkpoint (run.checkpoint_every)")
    return ckpt / "model", checkpoint_version(ckpt), args.name or run.resolve().name
