"""Bring-your-own text: a tokenizer from tokenizer.json or a vocab.txt alone, token_type_ids
optional, data.max_length up to the model's limit (256 and 512), truncated texts counted."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.batched import run_split
from quantkit.backends.ort import OrtRunner
from quantkit.data import note_truncation
from quantkit.data.feeds import TextFeeds
from quantkit.data.splits import Splits, TextSplit
from quantkit.data.text import TextEncoder, load_tokenizer, model_max_length
from quantkit.errors import ConfigError, DataError

WORDS = ["the", "film", "good", "bad", "plot", "cast", "very", "dull", "fun"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_vocab(folder, *, extra_config: dict | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(SPECIAL + WORDS + ["##s"]) + "\n")
    if extra_config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(extra_config))
    return folder / "vocab.txt"


def bert_like_model(vocab_size: int, *, with_types: bool, max_positions: int = 512
                    ) -> onnx.ModelProto:
    """ids (+ types) + positions -> embeddings, masked mean, 2 logits (a real ORT graph)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 1, (vocab_size, 4)).astype(np.float32), "tok"),
             numpy_helper.from_array(rng.normal(0, 1, (max_positions, 4)).astype(np.float32), "pos"),
             numpy_helper.from_array(rng.normal(0, 1, (4, 2)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([-1], np.int64), "last"),
             numpy_helper.from_array(np.array([1], np.int64), "seq_axis")]
    nodes = [helper.make_node("Gather", ["tok", "input_ids"], ["e"]),
             helper.make_node("Shape", ["input_ids"], ["shape"]),
             helper.make_node("Gather", ["shape", "seq_axis"], ["seq"], axis=0),
             helper.make_node("Squeeze", ["seq"], ["seq0"]),
             helper.make_node("Range", ["zero", "seq0", "one"], ["positions"]),
             helper.make_node("Gather", ["pos", "positions"], ["p"]),
             helper.make_node("Add", ["e", "p"], ["ep"])]
    inits += [numpy_helper.from_array(np.array(0, np.int64), "zero"),
              numpy_helper.from_array(np.array(1, np.int64), "one")]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"])]
    last = "ep"
    if with_types:
        inits.append(numpy_helper.from_array(rng.normal(0, 1, (2, 4)).astype(np.float32), "typ"))
        nodes += [helper.make_node("Gather", ["typ", "token_type_ids"], ["t"]),
                  helper.make_node("Add", ["ep", "t"], ["ept"])]
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["b", "s"]))
        last = "ept"
    nodes += [helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
              helper.make_node("Unsqueeze", ["m", "last"], ["m3"]),
              helper.make_node("Mul", [last, "m3"], ["masked"]),
              helper.make_node("ReduceSum", ["masked", "seq_axis"], ["sum"], keepdims=0),
              helper.make_node("MatMul", ["sum", "w"], ["logits"])]
    g = helper.make_graph(nodes, "bert_like", inputs,
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", 2])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def test_vocab_txt_alone_is_a_bert_wordpiece_tokenizer(tmp_path):
    vocab = write_vocab(tmp_path / "tok")
    for path in (vocab, vocab.parent):  # the file or its directory
        tok = load_tokenizer(str(path))
        enc = TextEncoder(tok, max_length=16, input_names=["input_ids", "attention_mask",
                                                           "token_type_ids"])
        feed = enc.encode(["The film", "bad films"])
        cls, sep = SPECIAL.index("[CLS]"), SPECIAL.index("[SEP]")
        the, film, s = (len(SPECIAL) + WORDS.index("the"), len(SPECIAL) + WORDS.index("film"),
                        len(SPECIAL) + len(WORDS))
        assert feed["input_ids"][0, :4].tolist() == [cls, the, film, sep]  # lowercased
        assert feed["input_ids"][1, :5].tolist() == [cls, len(SPECIAL) + WORDS.index("bad"),
                                                     film, s, sep]  # film ##s
        assert feed["token_type_ids"].max() == 0 and feed["attention_mask"][0].sum() == 4


def test_vocab_lowercase_follows_tokenizer_config_or_the_setting(tmp_path):
    vocab = write_vocab(tmp_path / "cased", extra_config={"do_lower_case": False})
    unk = SPECIAL.index("[UNK]")
    ids = TextEncoder(load_tokenizer(str(vocab)), max_length=8,
                      input_names=["input_ids"]).encode(["The"])["input_ids"]
    assert ids[0, 1] == unk  # "The" is not in the lowercase vocab when casing is kept
    ids = TextEncoder(load_tokenizer(str(vocab), lowercase=True), max_length=8,
                      input_names=["input_ids"]).encode(["The"])["input_ids"]
    assert ids[0, 1] == len(SPECIAL)


def test_vocab_without_special_tokens_is_refused(tmp_path):
    (tmp_path / "vocab.txt").write_text("the\nfilm\n")
    with pytest.raises(DataError) as err:
        load_tokenizer(str(tmp_path / "vocab.txt"))
    assert "[CLS]" in str(err.value) and "data.tokenizer" in str(err.value)


@pytest.mark.parametrize("with_types", [True, False])
@pytest.mark.parametrize("max_length", [256, 512])
def test_long_inputs_run_truncate_and_are_counted(tmp_path, with_types, max_length):
    vocab = write_vocab(tmp_path / "tok", extra_config={"model_max_length": 512})
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_types else [])
    assert model_max_length(str(vocab)) == 512
    enc = TextEncoder(load_tokenizer(str(vocab)), max_length=max_length, input_names=names,
                      model_limit=model_max_length(str(vocab)))
    rng = np.random.default_rng(0)
    lengths = [5, max_length - 2, max_length - 1, max_length + 40, 900]  # words (+ CLS, SEP)
    texts = [" ".join(rng.choice(WORDS, size=n)) for n in lengths]
    feeds = TextFeeds(enc)
    assert feeds.truncated(texts).tolist() == [False, False, True, True, True]
    assert feeds.lengths(texts).tolist() == [7, max_length, max_length, max_length, max_length]
    model = tmp_path / "m.onnx"
    onnx.save(bert_like_model(len(SPECIAL) + len(WORDS) + 1, with_types=with_types), str(model))
    split = TextSplit("test", texts, [0, 1, 0, 1, 0])
    with OrtRunner(str(model)) as r:
        logits = run_split(r, feeds, split, output="logits", batch_size=2)
    assert logits.shape == (5, 2) and np.isfinite(logits).all()
    for idx, feed in feeds.batches(split, 2):
        assert set(feed) == set(names) and feed["input_ids"].shape[1] <= max_length
    splits = Splits(train=split.subset([0], "train"), calib=split.subset([1], "calib"),
                    dev=split.subset([2], "dev"), test=split.subset([3, 4], "test"),
                    label_names=["a", "b"])
    counts = note_truncation(splits, feeds)
    assert counts == {"train": 0, "calib": 0, "dev": 1, "test": 2}
    assert splits.info.truncated == counts and splits.info.max_length == max_length
    assert "texts_truncated" in splits.info.warning_codes()


def test_max_length_above_the_model_limit_is_refused(tmp_path):
    vocab = write_vocab(tmp_path / "tok", extra_config={"model_max_length": 256})
    with pytest.raises(ConfigError) as err:
        TextEncoder(load_tokenizer(str(vocab)), max_length=512, input_names=["input_ids"],
                    model_limit=model_max_length(str(vocab)))
    msg = str(err.value)
    assert "data.max_length" in msg and "512" in msg and "data.max_length=256" in msg


def test_model_limit_from_config_json_and_transformers_no_limit(tmp_path):
    write_vocab(tmp_path / "a", extra_config={"model_max_length": int(1e30)})
    assert model_max_length(str(tmp_path / "a")) is None  # transformers' "no limit"
    (tmp_path / "a" / "config.json").write_text(json.dumps({"max_position_embeddings": 384}))
    assert model_max_length(str(tmp_path / "a" / "vocab.txt")) == 384
    assert model_max_length(str(tmp_path / "nowhere" / "tokenizer.json")) is None


def test_minilm_tokenizer_limit(minilm_asset):
    """The embedded MiniLM tokenizer: 512 tokens from its own tokenizer_config.json."""
    path = minilm_asset
    assert model_max_length(str(path)) == 512
    enc = TextEncoder(load_tokenizer(str(path)), max_length=512,
                      input_names=["input_ids", "attention_mask"],
                      model_limit=model_max_length(str(path)))
    assert enc.truncated(["word " * 600, "a short review"]).tolist() == [True, False]


def _wordlevel_json(folder, vocab: list[str], *, pad_id: int | None):
    """A tokenizer.json (tokenizers' own format) with these words as ids 0.., and a padding
    setting with ``pad_id`` (None: none saved), as transformers saves RoBERTa-style ones."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if pad_id is not None:
        tok.enable_padding(pad_id=pad_id, pad_token=vocab[pad_id])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return str(folder / "tokenizer.json")


@pytest.mark.parametrize("pad_id,vocab,expected", [
    (1, ["<s>", "<pad>", "</s>", "<unk>"], 1),  # MPNet / RoBERTa: the saved padding setting
    (None, ["<s>", "</s>", "<unk>", "<pad>"], 3),  # no setting: the pad token's id
    (None, ["<s>", "</s>", "<unk>"], 0),  # neither: 0, as before
])
def test_batches_are_padded_with_the_tokenizers_pad_id(tmp_path, pad_id, vocab, expected):
    words = vocab + WORDS
    enc = TextEncoder(load_tokenizer(_wordlevel_json(tmp_path, words, pad_id=pad_id)),
                      max_length=16, input_names=["input_ids", "attention_mask"])
    feeds = enc.encode(["film", "the film good very good"])
    assert enc.pad_id == expected
    assert feeds["input_ids"][0].tolist() == [words.index("film")] + [expected] * 4
    assert feeds["attention_mask"][0].tolist() == [1, 0, 0, 0, 0]


def test_a_bert_vocab_pads_with_its_pad_token_zero(tmp_path):
    enc = TextEncoder(load_tokenizer(str(write_vocab(tmp_path / "tok"))), max_length=16,
                      input_names=["input_ids", "attention_mask", "token_type_ids"])
    feeds = enc.encode(["film", "the film good"])
    assert enc.pad_id == 0 and feeds["input_ids"][0, 3:].tolist() == [0, 0]


def test_the_pad_id_is_part_of_the_fingerprint_and_zero_keeps_old_keys(tmp_path):
    import hashlib

    words = ["<s>", "<pad>", "</s>", "<unk>"] + WORDS
    names = ["input_ids", "attention_mask"]
    one = TextEncoder(load_tokenizer(_wordlevel_json(tmp_path / "a", words, pad_id=1)),
                      max_length=16, input_names=names)
    zero = TextEncoder(load_tokenizer(_wordlevel_json(tmp_path / "b", words, pad_id=0)),
                       max_length=16, input_names=names)
    assert one.tokenizer.to_str() == zero.tokenizer.to_str()  # padding is off in both now
    assert one.fingerprint() != zero.fingerprint()
    old = hashlib.sha256(zero.tokenizer.to_str().encode())  # the key before pad ids
    old.update(json.dumps(zero.fields, sort_keys=True).encode())
    assert zero.fingerprint() == old.hexdigest()
