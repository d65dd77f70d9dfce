"""Where prompts come from: the command line, a file, a dataset, the held-out sets; chat templates."""
from __future__ import annotations

import json
from pathlib import Path

from .common import fail


def read_prompts(args) -> tuple[list, str]:
    """Prompts as strings, or chat conversations (lists of {"role", "content"} messages)."""
    if args.prompt:
        return list(args.prompt), "command line"
    if args.prompt_file:
        path = Path(args.prompt_file)
        if not path.is_file():
            fail(f"--prompt_file {path} does not exist")
        prompts = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            if path.suffix == ".jsonl":
                try:
                    record = json.loads(line)
                    prompts.append(_record_prompt(record) if isinstance(record, dict) else str(record))
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    fail(f"{path}:{number}: expected a JSON object with a 'prompt' or 'messages' key ({exc})")
            else:
                prompts.append(line.replace("\\n", "\n"))
        if not prompts:
            fail(f"{path} holds no prompts")
        return prompts, str(path)
    if getattr(args, "dataset_name", None) not in (None, "embedded"):
        return read_dataset(args), f"dataset {args.dataset_name}"
    if getattr(args, "default_chat_prompts", False):
        from ..models.prompt_sets import grounded_chat_prompts, heldout_chat_prompts

        args.use_chat_template = True
        n = args.dataset_max_samples if args.dataset_max_samples > 0 else 8
        chat, grounded = heldout_chat_prompts(), grounded_chat_prompts()
        mixed = [p for pair in zip(chat, grounded) for p in pair][:n]  # alternating: any prefix is a mix
        return mixed, (f"{n} held-out requests: chat and input-grounded (fix / rewrite / extract) alternating "
                       "(optimum_uag.models.prompt_sets)")
    from ..models import eval_prompts

    return eval_prompts(), "embedded held-out prompts"


def _record_prompt(record: dict):
    if "messages" in record:
        messages = record["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m and "content" in m
                                                     for m in messages):
            raise TypeError("'messages' must be a list of {'role': ..., 'content': ...}")
        return messages
    return record["prompt"]


def read_dataset(args) -> list[str]:
    """Rows of a dataset column via datasets.load_dataset, as optimum-habana's example reads them (split test,
    else validation, else train); local files (.json/.jsonl/.csv/.txt/.parquet) and saved datasets work offline."""
    try:
        import datasets
    except ImportError:
        fail("--dataset_name needs the `datasets` package: pip install datasets")
    name = args.dataset_name
    path = Path(name)
    builders = {".json": "json", ".jsonl": "json", ".csv": "csv", ".txt": "text", ".parquet": "parquet"}
    try:
        if path.is_dir() and ((path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists()):
            data = datasets.load_from_disk(str(path))
        elif path.is_file() and path.suffix in builders:
            data = datasets.load_dataset(builders[path.suffix], data_files=str(path))
        else:
            data = datasets.load_dataset(name)
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds (network, format)
        fail(f"--dataset_name {name}: could not load it ({type(exc).__name__}: {str(exc).splitlines()[0][:160]}); "
             "without a network pass a local JSON/CSV/text file or a dataset saved with save_to_disk")
    if isinstance(data, datasets.DatasetDict):
        split = next((s for s in ("test", "validation", "train") if s in data), next(iter(data)))
        data = data[split]
    columns = [c for c, f in data.features.items() if getattr(f, "dtype", None) == "string"]
    column = args.column_name or (columns[0] if columns else None)
    if column is None or column not in data.column_names:
        fail(f"--column_name {column!r} is not a text column of {name} (text columns: {columns})")
    rows = data[column]
    if args.dataset_max_samples > 0:
        rows = rows[: args.dataset_max_samples]
    if not rows:
        fail(f"--dataset_name {name} holds no rows")
    return [str(r) for r in rows]


def apply_chat(tokenizer, prompts: list, use_chat_template: bool, template_path: str | None) -> tuple[list[str], bool]:
    """Chat conversations (or, with --use_chat_template, plain prompts as user messages) -> template text.
    Returns the texts and whether they already hold the special tokens (so encoding adds none)."""
    if template_path:
        path = Path(template_path)
        if not path.is_file():
            fail(f"--chat_template {path} does not exist")
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            text = json.loads(text).get("chat_template", text)
        tokenizer.chat_template = text
    chats = [p if isinstance(p, list) else ([{"role": "user", "content": p}] if use_chat_template else None)
             for p in prompts]
    if not any(c is not None for c in chats):
        return prompts, False
    if not all(c is not None for c in chats):
        fail("mix of chat conversations and plain prompts: use --use_chat_template to wrap the plain ones")
    if not getattr(tokenizer, "chat_template", None):
        fail("the target's tokenizer has no chat template: pass --chat_template FILE, or plain prompts")
    return [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats], True
