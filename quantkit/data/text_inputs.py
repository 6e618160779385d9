"""Which tokenizer field (input_ids, attention_mask, token_type_ids) feeds which model input:
the mapping from model.inputs and its check against the model's inputs, before any inference."""

from __future__ import annotations

from collections.abc import Sequence

from quantkit.errors import DataError

__all__ = ["TEXT_FIELDS", "text_input_map", "check_text_inputs"]


#: tokenizer fields a text model may take, in the order model.inputs lists them
TEXT_FIELDS = ("input_ids", "attention_mask", "token_type_ids")


def text_input_map(inputs_cfg) -> dict[str, str]:
    """tokenizer field -> the model input name it feeds (``model.inputs``; default: itself)."""
    return {f: (getattr(inputs_cfg, f, None) or f) for f in TEXT_FIELDS}


def check_text_inputs(model_inputs: Sequence[str], inputs_cfg) -> dict[str, str]:
    """The tokenizer fields this model takes, mapped to its input names ({field: name}).

    One DataError before any inference when a model input cannot be fed from the tokenizer,
    when the model has no token-id input, or when ``model.inputs.<field>`` names an input the
    model does not have; the error names the model's actual inputs and the setting to set.
    ``token_type_ids`` under its default name is fed only when the model has it.
    """
    names = list(model_inputs)
    mapping = text_input_map(inputs_cfg)
    given = {f for f in TEXT_FIELDS if getattr(inputs_cfg, f, None)}
    example = " ".join(f"model.inputs.{f}=<name>" for f in TEXT_FIELDS[:2])
    for f in sorted(given):
        if mapping[f] not in names:
            raise DataError(f"model.inputs.{f} names an input the model does not have",
                            where=f"model.inputs.{f}", value=mapping[f],
                            fix=f"the model's inputs are {names}; set model.inputs.{f} to one "
                                "of them")
    fed = {mapping[f]: f for f in TEXT_FIELDS if mapping[f] in names}
    unknown = [n for n in names if n not in fed]
    if unknown:
        raise DataError("a model input cannot be fed from the tokenizer",
                        where="model.inputs", value=unknown[0],
                        fix=f"the model's inputs are {names}; map the tokenizer's fields to "
                            f"them with {example} (token_type_ids: model.inputs."
                            "token_type_ids=<name>)")
    if mapping["input_ids"] not in names:
        raise DataError("the model has no token-id input the tokenizer can feed",
                        where="model.inputs.input_ids", value=names,
                        fix=f"the model's inputs are {names}; set model.inputs.input_ids=<the "
                            "token-id input>")
    return {f: n for n, f in fed.items()}
