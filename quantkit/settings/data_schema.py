"""data.* schema: the dataset, its splits and image preprocessing; the data checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING

from quantkit.errors import ConfigError
from quantkit.settings.value_checks import _choice, _fraction, _positive


@dataclass
class TrainSplitConfig:
    # examples the head is fitted on (zoo / hub text models): whole groups, trimmed to
    # exactly this many; null = every example left after test, dev and calibration
    size: Optional[int] = None


@dataclass
class CalibSplitConfig:
    num_samples: int = 256  # calibration examples: whole groups, disjoint from every split
    warn_below: int = 64  # fewer: a named warning (calib_small): ranges may be unstable
    min_samples: int = 8  # fewer: refused (ConfigError at data.calib.num_samples)


@dataclass
class DevSplitConfig:
    """The split every choice is made on (calibrator, layer ranking, search)."""

    size: Optional[int] = None  # examples (whole groups); overrides data.dev_fraction
    limit: Optional[int] = None  # seeded subsample, stratified by label, after splitting


@dataclass
class TestSplitConfig:
    """The split the sign-off is evaluated on, once per candidate."""

    __test__ = False  # not a pytest test class

    limit: Optional[int] = None  # seeded subsample, stratified by label, after splitting


@dataclass
class EvalSplitConfig:
    # deprecated alias of data.test.limit (the test split was called "eval")
    limit: Optional[int] = None


@dataclass
class ImageConfig:
    """How images become model input (data.kind=image): resize, channels, normalization."""

    size: int = 112  # resized to size x size
    channels: int = 3  # 3: grayscale replicated; 1: RGB reduced to luma
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])  # on [0, 1]
    std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])
    resize: str = "bilinear"  # bilinear (as torch, align_corners=False) | none
    layout: str = "NCHW"  # NCHW | NHWC: the model input's layout
    # RGB | BGR: the channel order the model was trained on (OpenCV / Caffe models: BGR);
    # mean and std are given in that order
    channel_order: str = "RGB"
    # image files with transparency: composite over white | black, or drop the alpha channel
    alpha: str = "white"


@dataclass
class PagesConfig:
    """data=layout_pages: seeded document pages rendered with their box labels
    (quantkit/data/layout_pages.py); the page template is each page's group."""

    n_pages: int = 400  # pages rendered (each split takes whole templates)
    n_templates: int = 260  # page designs; a template's pages are on one side of every split
    seed: int = 0  # the pages drawn (the run's seed draws the splits)


@dataclass
class DataConfig:
    name: str = MISSING
    kind: str = "text"  # text | image | detection (model.output.kind=detection)
    source: str = "embedded"  # embedded | local | hub
    path: Optional[str] = None  # local: csv/json/parquet file(s) or image folder; hub: id
    format: Optional[str] = None  # local: csv | json | parquet (default: from the suffix)
    encoding: Optional[str] = None  # local csv/json text encoding (default utf-8), e.g. latin-1
    hub_config: Optional[str] = None
    train_split: str = "train"  # hub datasets that come pre-split
    eval_split: Optional[str] = None  # hub: a named split used as the test split
    text_column: str = "text"
    image_column: str = "image"  # hub image datasets: the column with the images
    # null: label-free data (no labels; verdicts on agreement with FP32). Image folders
    # without class subfolders are label-free whatever this says.
    label_column: Optional[str] = "label"
    group_column: Optional[str] = None  # split by this column: no group in two splits
    label_names: list[str] = field(default_factory=list)  # class id -> name
    label_map: dict[str, int] = field(default_factory=dict)  # raw label value -> class id
    drop_values: list[str] = field(default_factory=list)  # labels whose rows are dropped
    # fraction of the examples (whole groups) in the test split, unless the source comes
    # with one (Fashion-MNIST's test images, data.eval_split); null: data.eval_fraction
    test_fraction: Optional[float] = None
    eval_fraction: Optional[float] = None  # deprecated alias of test_fraction (default 0.2)
    # fraction of the examples (whole groups) in the dev split; null: whatever is left
    # after test, calibration and data.train.size
    dev_fraction: Optional[float] = 0.2
    tokenizer: Optional[str] = None  # tokenizer.json / vocab.txt / directory / hub name
    lowercase: Optional[bool] = None  # vocab.txt tokenizers: default tokenizer_config.json, else true
    max_length: int = 128  # tokens; at most the model's limit (tokenizer_config / config.json)
    batch_size: int = 32
    train: TrainSplitConfig = field(default_factory=TrainSplitConfig)
    calib: CalibSplitConfig = field(default_factory=CalibSplitConfig)
    dev: DevSplitConfig = field(default_factory=DevSplitConfig)
    test: TestSplitConfig = field(default_factory=TestSplitConfig)
    eval: EvalSplitConfig = field(default_factory=EvalSplitConfig)
    image: ImageConfig = field(default_factory=ImageConfig)
    # detection: the box labels of the images in data.path, a COCO JSON file or a YOLO txt
    # folder (<image stem>.txt); null: label-free (the candidate against FP32's detections)
    labels: Optional[str] = None
    pages: PagesConfig = field(default_factory=PagesConfig)


DEFAULT_TEST_FRACTION = 0.2


def resolve_test_fraction(d: DataConfig) -> tuple[str, float]:
    """(the key the user set, the test fraction): data.test_fraction, else its deprecated
    alias data.eval_fraction, else the default 0.2."""
    if d.test_fraction is not None:
        return "data.test_fraction", d.test_fraction
    if d.eval_fraction is not None:
        return "data.eval_fraction", d.eval_fraction
    return "data.test_fraction", DEFAULT_TEST_FRACTION


def resolve_test_limit(d: DataConfig) -> tuple[str, Optional[int]]:
    """(key, limit) of the test split: data.test.limit, else its alias data.eval.limit."""
    if d.test.limit is not None:
        return "data.test.limit", d.test.limit
    return ("data.eval.limit" if d.eval.limit is not None else "data.test.limit"), d.eval.limit


def validate_data_splits(d: DataConfig) -> None:
    """Split sizes and fractions (data.test_fraction / dev_fraction / *.size / *.limit)."""
    if (d.test_fraction is not None and d.eval_fraction is not None
            and d.test_fraction != d.eval_fraction):
        raise ConfigError("data.eval_fraction is a deprecated alias of data.test_fraction and "
                          "the two differ", where="data.eval_fraction", value=d.eval_fraction,
                          fix=f"set only data.test_fraction={d.test_fraction}")
    if (d.test.limit is not None and d.eval.limit is not None and d.test.limit != d.eval.limit):
        raise ConfigError("data.eval.limit is a deprecated alias of data.test.limit and the "
                          "two differ", where="data.eval.limit", value=d.eval.limit,
                          fix=f"set only data.test.limit={d.test.limit}")
    key, test_fraction = resolve_test_fraction(d)
    _fraction(key, test_fraction)
    _fraction("data.dev_fraction", d.dev_fraction)
    _positive("data.train.size", d.train.size, allow_none=True)
    _positive("data.dev.size", d.dev.size, allow_none=True)
    _positive("data.dev.limit", d.dev.limit, allow_none=True)
    _positive("data.test.limit", d.test.limit, allow_none=True)
    _positive("data.eval.limit", d.eval.limit, allow_none=True)
    c = d.calib
    _positive("data.calib.num_samples", c.num_samples)
    _positive("data.calib.min_samples", c.min_samples)
    if c.warn_below < c.min_samples:
        raise ConfigError("config key data.calib.warn_below must be >= data.calib.min_samples",
                          value=c.warn_below, fix=f"set data.calib.warn_below >= {c.min_samples}")
    if d.encoding is not None:
        import codecs

        try:
            codecs.lookup(d.encoding)
        except LookupError:
            raise ConfigError("config key data.encoding names no known text encoding",
                              value=d.encoding, fix="e.g. data.encoding=latin-1 or utf-8") from None


def validate_image(im: ImageConfig) -> None:
    """Image data settings (data.kind=image)."""
    _positive("data.image.size", im.size)
    _choice("data.image.channels", im.channels, (3, 1))
    _choice("data.image.resize", im.resize, ("bilinear", "none"))
    _choice("data.image.layout", im.layout, ("NCHW", "NHWC"))
    _choice("data.image.channel_order", im.channel_order, ("RGB", "BGR"))
    _choice("data.image.alpha", im.alpha, ("white", "black", "drop"))
    for key in ("mean", "std"):
        values = getattr(im, key)
        if len(values) != im.channels:
            raise ConfigError(f"config key data.image.{key} needs one value per channel",
                              value=list(values), fix=f"give {im.channels} values "
                              f"(data.image.channels={im.channels})")
    if any(v <= 0 for v in im.std):
        raise ConfigError("config key data.image.std must be positive", value=list(im.std),
                          fix="e.g. data.image.std=[0.229,0.224,0.225] (ImageNet)")


def validate_detection_data(d: DataConfig) -> None:
    """data.kind=detection: images from a local folder (data.path) with optional box labels,
    or the rendered layout pages (data=layout_pages)."""
    if d.source == "hub":
        raise ConfigError("detection data comes from a local image folder or the rendered "
                          "layout pages", where="data.source", value="hub",
                          fix="use data=detection_folder data.path=<images> "
                              "data.labels=<COCO JSON | YOLO txt folder>, or data=layout_pages")
    if d.source == "embedded" and d.name != "layout_pages":
        raise ConfigError("unknown embedded detection data set", where="data.name", value=d.name,
                          fix="use data=layout_pages, or data=detection_folder with your images")
    if d.source == "embedded" and d.labels is not None:
        raise ConfigError("data=layout_pages writes its own labels", where="data.labels",
                          value=d.labels, fix="remove data.labels, or use data=detection_folder")
    _positive("data.pages.n_pages", d.pages.n_pages)
    _positive("data.pages.n_templates", d.pages.n_templates)


def validate_data(d: DataConfig) -> None:
    """Data source path and format, split sizes, max_length and batch_size (data.*)."""
    if d.kind == "detection":
        validate_detection_data(d)
    elif d.labels is not None:
        raise ConfigError("data.labels are box labels of detection data", where="data.labels",
                          value=d.labels, fix="remove data.labels, or use data.kind=detection "
                          "with model.output.kind=detection")
    if d.source in ("local", "hub") and not d.path:
        raise ConfigError(f"data.source={d.source} needs a path", where="data.path",
                          value=d.path,
                          fix="add data.path=<file.csv|json|parquet> (local) or <dataset id> (hub)")
    if d.format is not None:
        _choice("data.format", d.format, ("csv", "json", "parquet"))
    validate_data_splits(d)
    _positive("data.max_length", d.max_length)
    _positive("data.batch_size", d.batch_size)
