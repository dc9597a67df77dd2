"""The public data sets the shipped experiments read: where each file comes from, how it is
unpacked, where it goes under `paths.data_dir`, and the size and sha256 it must have
(`xfmr-data get NAME`, xfmr.data.fetch).

Pure standard library: `xfmr-data` lists and checks these without loading torch.

Where the pinned values come from (checked 2026-11-27; what was not downloaded and hashed here
says so):

- tiny Shakespeare: hashed here from the file's git blob at karpathy/char-rnn commit 6f9487a6;
  several published records of this URL give the same size and sha256.
- Multi30k: hashed here from the .gz files' git blobs at multi30k/dataset commit a3d2e0d2 (last
  changed in c9be912d, 2018), and the files they decompress to.
- SST-2: the archive's size and sha256 as Hugging Face `datasets` records them for this URL
  (datasets/glue/dataset_infos.json, commit 040102f1); not downloaded here. dev.tsv: hashed
  here from a published copy whose MD5 equals torchtext's record of this archive's dev.tsv
  (268856b4..., torchtext/datasets/sst2.py). No record pins train.tsv: the archive's sha256
  vouches for it.
- CoNLL-2003: the archive's size and sha256 as Hugging Face `datasets` recorded them once it
  moved to this mirror (datasets/conll2003/dataset_infos.json, commit e1e5b8e5); a second,
  independent download record gives the same sha256. Not downloaded here; no record pins the
  files inside it.
- SQuAD v1.1: sizes and sha256 as Hugging Face `datasets` records them
  (datasets/squad/dataset_infos.json, commit 040102f1, and url_checksums/checksums.txt agree);
  not downloaded here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Unpack = Literal["none", "gunzip", "unzip"]
UNPACKS: tuple[Unpack, ...] = ("none", "gunzip", "unzip")

# How the experiments name a data file: conf/paths/default.yaml's data_dir, then the file.
DATA_DIR_REF = "${paths.data_dir}/"
_NAMED_PATH = re.compile(re.escape(DATA_DIR_REF) + r"([^\s'\"}\],#]+)")


@dataclass(frozen=True)
class Download:
    """One file fetched from a source.

    Args:
        url: where it is fetched from.
        size, sha256: what it must be (None: no trustworthy record pins it).
        unpack: "none" (the file itself), "gunzip" (a .gz of one file) or "unzip" (a .zip whose
            members become files).
    """

    url: str
    size: int | None
    sha256: str | None
    unpack: Unpack = "none"

    def __post_init__(self) -> None:
        assert self.unpack in UNPACKS, self.unpack


@dataclass(frozen=True)
class DataFile:
    """One file an experiment reads, at `path` under `paths.data_dir`.

    Args:
        path: relative to `paths.data_dir`, "/"-separated, e.g. "multi30k/train.de".
        source: the download it comes from.
        member: for an "unzip" source, the member that becomes this file.
        size, sha256: what the laid-out file must be; for a "none" source, the download's.
    """

    path: str
    source: Download
    member: str | None = None
    size: int | None = None
    sha256: str | None = None

    def __post_init__(self) -> None:
        assert (self.member is not None) == (self.source.unpack == "unzip"), self.path

    @property
    def expected(self) -> tuple[int | None, str | None]:
        """(size, sha256) the laid-out file must have; (None, None) where nothing pins it."""
        if self.source.unpack == "none":
            return self.source.size, self.source.sha256
        return self.size, self.sha256


@dataclass(frozen=True)
class DataSet:
    """A data set `xfmr-data get NAME` lays out under `paths.data_dir/NAME/`.

    Args:
        name: the command's NAME, also the folder its files go in.
        title: what it is, in a few words.
        homepage: where it is described.
        licence: its terms, as far as they are known.
        files: every file it lays out.
    """

    name: str
    title: str
    homepage: str
    licence: str
    files: tuple[DataFile, ...]

    @property
    def downloads(self) -> tuple[Download, ...]:
        return tuple(dict.fromkeys(f.source for f in self.files))

    @property
    def download_size(self) -> int | None:
        sizes = [d.size for d in self.downloads]
        return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


def _multi30k_file(
    split: str, language: str, gz: tuple[int, str], text: tuple[int, str]
) -> DataFile:
    url = f"{_MULTI30K}/{split}.{language}.gz"
    return DataFile(
        f"multi30k/{split}.{language}",
        Download(url, *gz, unpack="gunzip"),
        size=text[0],
        sha256=text[1],
    )


_MULTI30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
_SST2 = Download(
    "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",
    7439277,
    "d67e16fb55739c1b32cdce9877596db1c127dc322d93c082281f64057c16deaa",
    unpack="unzip",
)
_CONLL = Download(
    "https://data.deepai.org/conll2003.zip",
    982975,
    "96a104d174ddae7558bab603f19382c5fe02ff1da5c077a7f3ce2ced1578a2c3",
    unpack="unzip",
)
_SQUAD = "https://rajpurkar.github.io/SQuAD-explorer/dataset"

DATA_SETS: tuple[DataSet, ...] = (
    DataSet(
        "tinyshakespeare",
        "tiny Shakespeare: 1.1 MB of Shakespeare's plays as one text file (char-rnn)",
        "https://github.com/karpathy/char-rnn",
        "the plays are in the public domain; the char-rnn repository is MIT-licensed",
        (
            DataFile(
                "tinyshakespeare/input.txt",
                Download(
                    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
                    "tinyshakespeare/input.txt",
                    1115394,
                    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                ),
            ),
        ),
    ),
    DataSet(
        "multi30k",
        "Multi30k task 1: 31k German-English image captions, one sentence per line",
        "https://github.com/multi30k/dataset",
        "for non-commercial research and education (derived from Flickr30k; see its README)",
        (
            _multi30k_file(
                "train",
                "de",
                (637044, "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6"),
                (2110398, "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72"),
            ),  # fmt: skip
            _multi30k_file(
                "train",
                "en",
                (568929, "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f"),
                (1801238, "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6"),
            ),  # fmt: skip
            _multi30k_file(
                "val",
                "de",
                (24681, "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"),
                (75981, "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660"),
            ),  # fmt: skip
            _multi30k_file(
                "val",
                "en",
                (21650, "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28"),
                (63297, "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227"),
            ),  # fmt: skip
            _multi30k_file(
                "test_2016_flickr",
                "de",
                (22890, "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"),
                (70649, "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16"),
            ),  # fmt: skip
            _multi30k_file(
                "test_2016_flickr",
                "en",
                (21077, "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"),
                (62076, "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182"),
            ),  # fmt: skip
        ),
    ),
    DataSet(
        "sst2",
        "SST-2 (GLUE): 68k movie-review sentences labelled negative (0) or positive (1)",
        "https://gluebenchmark.com/tasks",
        "no licence stated by GLUE or the Stanford Sentiment Treebank; cite Socher et al. 2013",
        (
            DataFile("sst2/train.tsv", _SST2, member="SST-2/train.tsv"),
            DataFile(
                "sst2/dev.tsv",
                _SST2,
                member="SST-2/dev.tsv",
                size=94931,
                sha256="54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
            ),
        ),
    ),
    DataSet(
        "conll2003",
        "CoNLL-2003 English NER: Reuters news, one word per line with POS, chunk and IOB2 tags",
        "https://www.clips.uantwerpen.be/conll2003/ner/",
        "the text is Reuters RCV1 (research use under NIST's agreement); this archive is an "
        "unofficial mirror",
        (
            DataFile("conll2003/train.txt", _CONLL, member="train.txt"),
            DataFile("conll2003/dev.txt", _CONLL, member="valid.txt"),
            DataFile("conll2003/test.txt", _CONLL, member="test.txt"),
        ),
    ),
    DataSet(
        "squad",
        "SQuAD v1.1: 98k questions on Wikipedia paragraphs, each answered by a span",
        "https://rajpurkar.github.io/SQuAD-explorer/",
        "CC BY-SA 4.0",
        (
            DataFile(
                "squad/train-v1.1.json",
                Download(
                    f"{_SQUAD}/train-v1.1.json",
                    30288272,
                    "3527663986b8295af4f7fcdff1ba1ff3f72d07d61a20f487cb238a6ef92fd955",
                ),
            ),
            DataFile(
                "squad/dev-v1.1.json",
                Download(
                    f"{_SQUAD}/dev-v1.1.json",
                    4854279,
                    "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9",
                ),
            ),
        ),
    ),
)


def fetch_hint(path: str | Path, data_sets: Sequence[DataSet] = DATA_SETS) -> str:
    """For a missing file that is one of a data set's (`.../multi30k/train.de`), the command
    that fetches it there, as a clause to add to the message; else ""."""
    path = Path(path)
    for data_set in data_sets:
        for file in data_set.files:
            parts = Path(file.path).parts
            if path.parts[-len(parts) :] == parts:
                data_dir = Path(*path.parts[: -len(parts)]) if len(path.parts) > len(parts) else "."
                return f"; `xfmr-data get {data_set.name} --data-dir {data_dir}` fetches it there"
    return ""


def by_name(data_sets: Iterable[DataSet]) -> dict[str, DataSet]:
    return {d.name: d for d in data_sets}


def named_paths(experiment_yaml: str) -> list[str]:
    """The paths under `${paths.data_dir}/` an experiment's YAML text names (comments aside)."""
    lines = (line.split(" #", 1)[0] for line in experiment_yaml.splitlines())
    return [
        p for line in lines if not line.lstrip().startswith("#") for p in _NAMED_PATH.findall(line)
    ]


def experiment_paths(experiment_dir: Path) -> dict[str, list[str]]:
    """Experiment name -> the data files it names under `paths.data_dir`, for every
    experiment in `experiment_dir` that names one."""
    named = {
        p.stem: named_paths(p.read_text(encoding="utf-8"))
        for p in sorted(experiment_dir.glob("*.yaml"))
    }
    return {name: paths for name, paths in named.items() if paths}


def users(
    data_sets: Sequence[DataSet], experiments: Mapping[str, list[str]]
) -> dict[str, list[str]]:
    """Data set name -> the experiments that read one of its files."""
    owner = {f.path: d.name for d in data_sets for f in d.files}
    found: dict[str, list[str]] = {d.name: [] for d in data_sets}
    for experiment, paths in experiments.items():
        for name in dict.fromkeys(owner[p] for p in paths if p in owner):
            found[name].append(experiment)
    return found
