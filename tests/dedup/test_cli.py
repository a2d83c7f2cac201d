"""The dedup commands as ``zephyr.cli.Command``s: every flag has its help (its field's docstring), every
command a description, and the flags keep their names."""

from __future__ import annotations

import pytest
from zephyr.dedup.cli import COMMANDS
from zephyr.dedup.config import ExactDedupConfig, FuzzyDedupConfig, ParagraphDedupConfig, SubstringConfig

from zephyr.cli import build_parser
from zephyr.config import FieldError
from zephyr.flags import field_docs, flag_specs

FLAGS = {
    "exact": "--normalize --dropped-output",
    "fuzzy": "--threshold --preset --ngram --shingle --normalize --bands --rows-per-band --num-perm --seed "
    "--no-verify --clusters --signature-device --bucket-links --index --update-index --write-index "
    "--dropped-output",
    "url": "--url-column --dropped-output",
    "paragraph": "--method --normalize --expected --fp-rate --keep-first-in-doc --save-filter --load-filter",
    "substring": "--min-bytes --min-doc-bytes --anchor-bytes --source-column --top-spans --unit --tokenizer "
    "--text-column",
}
"""Each command's own flags (before the registry), besides the shared ones."""
SHARED = "--output --overwrite --on-error --mode --unify-schemas --schema --replace-columns --output-column"
COLUMNS = "--text-column --id-column --priority-column"


def test_every_flag_has_help_and_every_command_a_description():
    assert [c.words for c in COMMANDS] == [
        f"dedup {k}" for k in ("exact", "fuzzy", "url", "paragraph", "substring")
    ]
    for command in COMMANDS:
        help, description = command.texts()
        assert help and description.endswith("."), command.words
        for cls in command.options.values():
            for spec in flag_specs(cls):
                assert field_docs(spec.owner).get(spec.field.name), f"{command.words}: {spec.flag}"


@pytest.mark.parametrize("kind", list(FLAGS))
def test_the_flags_keep_their_names(kind):
    parser = build_parser(["dedup", kind])
    kinds = parser._subparsers._group_actions[0].choices["dedup"]._subparsers._group_actions[0].choices
    known = {flag for action in kinds[kind]._actions for flag in action.option_strings}
    wanted = FLAGS[kind] + " " + SHARED + ("" if kind == "substring" else " " + COLUMNS)
    assert set(wanted.split()) <= known, set(wanted.split()) - known


@pytest.mark.parametrize(
    ("config", "name"),
    [
        (ExactDedupConfig, "normalize"),
        (FuzzyDedupConfig, "clusters"),
        (FuzzyDedupConfig, "preset"),
        (FuzzyDedupConfig, "signature_device"),
        (ParagraphDedupConfig, "method"),
        (SubstringConfig, "unit"),
    ],
)
def test_a_config_built_in_python_refuses_a_choice_its_type_does_not_have(config, name):
    """The flags' choices come from each field's ``Literal``; a config built in Python is held to the same."""
    with pytest.raises(FieldError, match=rf"^{name}: must be one of '"):
        config(**{name: "bogus"})
    assert FuzzyDedupConfig(preset=None).preset is None
