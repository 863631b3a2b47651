"""CheXpert and MIMIC-CXR-JPG adapters on tiny fake datasets written in their exact formats
(plain and gzip-compressed CSVs, PNG and JPEG images)."""

import csv
import gzip
import io
import sys

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

import cfjax as cf

OBSERVATIONS = ["No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity",
                "Lung Lesion", "Edema", "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax",
                "Pleural Effusion", "Pleural Other", "Fracture", "Support Devices"]
META_HEADER = ["dicom_id", "subject_id", "study_id", "PerformedProcedureStepDescription", "ViewPosition",
               "Rows", "Columns"]
PATIENTS_HEADER = ["subject_id", "gender", "anchor_age", "anchor_year", "anchor_year_group", "dod"]


def write_csv(path, header, rows, gz=False):
    """A CSV as the datasets ship it: plain, or gzip-compressed when ``gz``."""
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    data = buf.getvalue().encode()
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def write_image(path, rng, fmt):
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = rng.integers(0, 256, (40, 30)).astype(np.uint8)
    Image.fromarray(pixels, "L").save(path, format=fmt)
    return pixels


def expected_image(pixels, size):
    im = Image.fromarray(pixels, "L").resize((size, size), Image.BILINEAR)
    return np.asarray(im, np.float32) / 255


def full_decode(path, size):
    """Independent reference: Pillow's full-resolution decoding, grayscale, bilinear resize."""
    with Image.open(path) as im:
        return np.asarray(im.convert("L").resize((size, size), Image.BILINEAR), np.float32) / 255


def labels_row(subject, study, effusion):
    obs = [""] * len(OBSERVATIONS)
    obs[OBSERVATIONS.index("Pleural Effusion")] = effusion
    return [subject, study] + obs


# ----------------------------------------------------------------------------- CheXpert
CHEXPERT_HEADER = ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA"] + OBSERVATIONS


@pytest.fixture
def chexpert(tmp_path, rng):
    root = tmp_path / "CheXpert-v1.0-small"
    root.mkdir()
    # (sex, age, view, effusion) -> what the adapter must do with it
    spec = [("Male", 55, "Frontal", "1.0"), ("Female", 70, "Frontal", "0.0"),
            ("Female", 40, "Frontal", ""), ("Male", 61, "Frontal", "-1.0"),
            ("Male", 50, "Lateral", "1.0"), ("Unknown", 45, "Frontal", "1.0"),
            ("Female", 18, "Frontal", "0.0")]
    rows, pixels = [], {}
    for i, (sex, age, view, eff) in enumerate(spec):
        rel = f"CheXpert-v1.0-small/train/patient{i:05d}/study1/view1_{view.lower()}.jpg"
        pixels[rel] = write_image(tmp_path / rel, rng, "PNG")  # PNG bytes behind a .jpg name: Pillow sniffs
        obs = [""] * len(OBSERVATIONS)
        obs[OBSERVATIONS.index("Pleural Effusion")] = eff
        rows.append([rel, sex, age, view, "PA" if view == "Frontal" else ""] + obs)
    write_csv(root / "train.csv", CHEXPERT_HEADER, rows)
    return root, rows, pixels


def test_chexpert_records_match_the_files(chexpert, tmp_path):
    root, rows, pixels = chexpert
    rec = cf.data.load_chexpert(root, size=16)
    assert rec["parents"]["sex"].tolist() == [0, 1, 1]
    assert rec["parents"]["age"].tolist() == [55, 70, 40]
    assert rec["parents"]["effusion"].tolist() == [1, 0, 0]  # blank -> negative
    assert rec["dropped"] == {"effusion uncertain": 1, "not frontal": 1, "sex unknown": 1, "age out of range": 1}
    for i, rel in enumerate([rows[0][0], rows[1][0], rows[2][0]]):
        np.testing.assert_allclose(rec["image"][i], expected_image(pixels[rel], 16), atol=1 / 255)
    pos = cf.data.load_chexpert(root, size=16, uncertain="positive", blank="drop")
    assert pos["parents"]["effusion"].tolist() == [1, 0, 1]
    assert pos["dropped"]["effusion blank"] == 1


def test_chexpert_reads_a_gzipped_table_and_counts_duplicate_paths(chexpert):
    root, rows, _ = chexpert
    plain = cf.data.load_chexpert(root, size=16)
    (root / "train.csv").unlink()
    write_csv(root / "train.csv", CHEXPERT_HEADER, rows + [rows[1], rows[0]], gz=True)
    rec = cf.data.load_chexpert(root, size=16)
    assert rec["dropped"] == dict(plain["dropped"], **{"duplicate image row": 2})
    for v in ("sex", "age", "effusion"):
        np.testing.assert_array_equal(rec["parents"][v], plain["parents"][v])
    np.testing.assert_array_equal(rec["image"], plain["image"])


def test_chexpert_cache_round_trip(chexpert, tmp_path):
    root, *_ = chexpert
    uncached = cf.data.load_chexpert(root, size=16)
    first = cf.data.load_chexpert(root, size=16, cache_dir=tmp_path / "cache")
    assert [p.name.startswith("images-") for p in (tmp_path / "cache").iterdir()] == [True]  # no temporary left
    second = cf.data.load_chexpert(root, size=16, cache_dir=tmp_path / "cache")
    np.testing.assert_array_equal(first["image"], uncached["image"])
    np.testing.assert_array_equal(second["image"], uncached["image"])
    # The cached array is memory-mapped, read-only: memory does not hold the dataset.
    assert isinstance(second["image"], np.memmap) and not second["image"].flags.writeable


def test_chexpert_failed_decoding_leaves_no_cache(chexpert, tmp_path):
    root, rows, _ = chexpert
    (tmp_path / rows[2][0]).write_bytes(b"not an image")  # the third kept image
    with pytest.raises(ValueError, match="unreadable image .*patient00002"):
        cf.data.load_chexpert(root, size=16, cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_chexpert_errors_name_the_file_and_column(chexpert, tmp_path):
    root, rows, _ = chexpert
    with pytest.raises(ValueError, match=r"valid.csv' \(or 'valid.csv.gz'\)"):
        cf.data.load_chexpert(root, "valid")
    write_csv(root / "valid.csv", ["Path", "Sex", "Age", "Frontal/Lateral"], [r[:4] for r in rows])
    with pytest.raises(ValueError, match="valid.csv.*missing column 'Pleural Effusion'"):
        cf.data.load_chexpert(root, "valid")
    (tmp_path / rows[0][0]).write_bytes(b"not an image")
    with pytest.raises(ValueError, match="unreadable image .*patient00000"):
        cf.data.load_chexpert(root)
    write_csv(root / "valid.csv", ["Path", "Sex", "Age", "Frontal/Lateral", "Pleural Effusion"],
              [[rows[4][0], "Male", 50, "Lateral", "1.0"]])
    with pytest.raises(ValueError, match=r"no usable frontal image.*'not frontal': 1"):
        cf.data.load_chexpert(root, "valid")


@pytest.mark.parametrize("column, bad", [("Age", "sixty"), ("Age", ""), ("Age", "nan"),
                                         ("Pleural Effusion", "yes"), ("Pleural Effusion", "2.0")])
def test_chexpert_malformed_values_name_file_column_and_row(chexpert, rng, column, bad):
    root, rows, _ = chexpert
    frontal_known = [i for i, r in enumerate(rows) if r[3] == "Frontal" and r[1] != "Unknown" and 20 <= r[2] <= 90]
    i = int(rng.choice(frontal_known))  # a row that reaches both checks
    rows = [list(r) for r in rows]
    rows[i][CHEXPERT_HEADER.index(column)] = bad
    gz = bool(rng.integers(2))
    (root / "train.csv").unlink()
    path = write_csv(root / "train.csv", CHEXPERT_HEADER, rows, gz=gz)
    with pytest.raises(cf.ValidationError) as err:
        cf.data.load_chexpert(root, size=16)
    msg = str(err.value)
    assert path.name in msg and f"column {column!r}" in msg and f"row {i + 1} (line {i + 2})" in msg, msg
    assert repr(bad) in msg, msg


# ----------------------------------------------------------------------------- MIMIC-CXR-JPG
def write_mimic(tmp_path, rng, gz, spec=None, studies=None, patients=None):
    """A MIMIC-CXR-JPG tree: ``spec`` (subject, study, dicom, view) metadata rows, ``studies``
    (subject, study, effusion) label rows, ``patients`` (subject, gender, age) rows."""
    root = tmp_path / "mimic-cxr-jpg"
    spec = spec or [("10000032", "50414267", "d1", "PA"), ("10000032", "50414267", "d2", "LATERAL"),
                    ("10000764", "57375967", "d3", "AP"), ("10000898", "50771383", "d4", "PA"),
                    ("11111111", "52222222", "d5", "PA")]
    studies = studies or [("10000032", "50414267", "1.0"), ("10000764", "57375967", "0.0"),
                          ("10000898", "50771383", "-1.0"), ("11111111", "52222222", "")]
    patients = patients or [("10000032", "F", 52), ("10000764", "M", 86), ("10000898", "F", 33)]
    meta = []
    for subject, study, dicom, view in spec:
        path = root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" / f"{dicom}.jpg"
        if not path.exists():
            write_image(path, rng, "JPEG")
        meta.append([dicom, subject, study, "CHEST (PA AND LAT)", view, 3056, 2544])
    files = {
        "meta": write_csv(root / "mimic-cxr-2.0.0-metadata.csv", META_HEADER, meta, gz),
        "labels": write_csv(root / "mimic-cxr-2.0.0-chexpert.csv", ["subject_id", "study_id"] + OBSERVATIONS,
                            [labels_row(*s) for s in studies], gz),
        "patients": write_csv(tmp_path / "patients.csv", PATIENTS_HEADER,
                              [[s, g, a, 2180, "2014 - 2016", ""] for s, g, a in patients], gz),
    }
    return root, files


@pytest.mark.parametrize("gz", [False, True], ids=["csv", "csv.gz"])
def test_mimic_records_match_the_files(tmp_path, rng, gz):
    root, files = write_mimic(tmp_path, rng, gz)
    # MIMIC-IV's patients table is passed as shipped (.csv.gz) or by its plain name.
    for patients in {files["patients"], tmp_path / "patients.csv"}:
        rec = cf.data.load_mimic_cxr(root, patients, size=16)
        assert rec["parents"]["sex"].tolist() == [1, 0]
        assert rec["parents"]["age"].tolist() == [52, 86]
        assert rec["parents"]["effusion"].tolist() == [1, 0]
        assert rec["dropped"] == {"not frontal": 1, "effusion uncertain": 1, "no patient record": 1}
        # JPEG is lossy: compare with Pillow's own decoding of the written file (a 40 x 30
        # image has no DCT scale >= 16 pixels a side but 1, so the decodings agree exactly).
        for i in range(2):
            np.testing.assert_array_equal(rec["image"][i], full_decode(rec["path"][i], 16))
    with pytest.raises(ValueError, match="patients.csv.*missing column 'anchor_age'"):
        write_csv(tmp_path / "patients.csv", ["subject_id", "gender"], [["10000032", "F"]])
        cf.data.load_mimic_cxr(root, tmp_path / "patients.csv")


def test_mimic_repeated_rows_are_counted_not_overwritten(tmp_path, rng):
    spec = [("10000032", "50414267", "d1", "PA"), ("10000032", "50414267", "d1", "PA"),  # same image twice
            ("10000764", "57375967", "d3", "AP"), ("10000764", "57375967", "d6", "PA"),
            ("10000898", "50771383", "d4", "PA"), ("12222222", "53333333", "d7", "PA")]
    studies = [("10000032", "50414267", "1.0"), ("10000032", "50414267", "1.0"),  # agreeing duplicate
               ("10000764", "57375967", "0.0"), ("10000764", "57375967", "1.0"),  # conflicting duplicate
               ("10000898", "50771383", "0.0"), ("12222222", "53333333", "1.0")]
    patients = [("10000032", "F", 52), ("10000764", "M", 86), ("10000898", "F", 33), ("10000898", "F", 33),
                ("12222222", "M", 40), ("12222222", "M", 41)]  # one agreeing, one conflicting duplicate
    root, files = write_mimic(tmp_path, rng, bool(rng.integers(2)), spec, studies, patients)
    rec = cf.data.load_mimic_cxr(root, files["patients"], size=12)
    assert [p.rsplit("/", 1)[1] for p in rec["path"]] == ["d1.jpg", "d4.jpg"]
    assert rec["parents"]["effusion"].tolist() == [1, 0]
    assert rec["dropped"] == {"duplicate image row": 1, "duplicate label row": 2, "duplicate patient row": 2,
                              "conflicting labels for study": 2, "conflicting patient records": 1}


@pytest.mark.parametrize("table, column, bad", [("patients", "anchor_age", "unknown"),
                                                ("patients", "anchor_age", "inf"),
                                                ("labels", "Pleural Effusion", "yes")])
def test_mimic_malformed_values_name_file_column_and_row(tmp_path, rng, table, column, bad):
    gz = bool(rng.integers(2))
    root, files = write_mimic(tmp_path, rng, gz)
    i = int(rng.integers(3))  # which row of the table (0-based) to break
    if table == "patients":
        patients = [["10000032", "F", 52], ["10000764", "M", 86], ["10000898", "F", 33]]
        patients[i][2] = bad
        write_mimic(tmp_path, rng, gz, patients=[tuple(p) for p in patients])
    else:
        studies = [["10000032", "50414267", "1.0"], ["10000764", "57375967", "0.0"], ["10000898", "50771383", "-1.0"]]
        studies[i][2] = bad
        write_mimic(tmp_path, rng, gz, studies=[tuple(s) for s in studies])
    with pytest.raises(cf.ValidationError) as err:
        cf.data.load_mimic_cxr(root, files["patients"], size=12)
    msg = str(err.value)
    assert files[table].name in msg and f"column {column!r}" in msg and f"row {i + 1} (line {i + 2})" in msg, msg


# ----------------------------------------------------------------------------- decoding
def smooth_radiograph(rng, h, w):
    """A smooth random image with a little noise (a radiograph's spectrum, roughly)."""
    yy, xx = np.mgrid[0:h, 0:w] / np.array([h, w], np.float64)[:, None, None]
    a = 128.0
    for _ in range(4):
        f = rng.uniform(0.5, 3.0, 2)
        a = a + rng.uniform(10, 30) * np.sin(2 * np.pi * (f[0] * xx + f[1] * yy) + rng.uniform(0, 2 * np.pi))
    return np.clip(a + rng.normal(0, 10, (h, w)), 0, 255).astype(np.uint8)


def test_large_jpegs_decode_at_reduced_size_and_match_a_full_decode(tmp_path, rng, monkeypatch):
    size = int(rng.choice([32, 64]))
    h, w = int(rng.integers(1100, 1500)), int(rng.integers(900, 1300))
    path = tmp_path / "mimic-cxr-jpg" / "files" / "p10" / "p10000032" / "s50414267" / "d1.jpg"
    path.parent.mkdir(parents=True)
    Image.fromarray(smooth_radiograph(rng, h, w), "L").save(path, quality=int(rng.integers(80, 96)))
    write_csv(path.parents[4] / "mimic-cxr-2.0.0-metadata.csv", META_HEADER,
              [["d1", "10000032", "50414267", "", "PA", h, w]])
    write_csv(path.parents[4] / "mimic-cxr-2.0.0-chexpert.csv", ["subject_id", "study_id"] + OBSERVATIONS,
              [labels_row("10000032", "50414267", "1.0")])
    write_csv(tmp_path / "patients.csv", PATIENTS_HEADER, [["10000032", "F", 52, 2180, "", ""]])
    decoded = []  # the size each JPEG is decoded at, after the draft request
    draft = JpegImagePlugin.JpegImageFile.draft

    def spy(self, mode, size_):
        out = draft(self, mode, size_)
        decoded.append(self.size)
        return out

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    rec = cf.data.load_mimic_cxr(path.parents[4], tmp_path / "patients.csv", size=size)
    # Decoded by DCT scaling at the smallest scale still >= size on each side (1/8 here).
    assert decoded == [((w + 7) // 8, (h + 7) // 8)]
    assert rec["image"].shape == (1, size, size) and rec["image"].dtype == np.float32
    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", draft)
    want = full_decode(path, size)
    err = np.abs(rec["image"][0] - want)
    assert err.mean() < 0.01 and err.max() < 0.06, (err.mean(), err.max())


def test_progress_bar_only_on_a_terminal(chexpert, capsys, monkeypatch):
    pytest.importorskip("tqdm")
    root, *_ = chexpert
    cf.data.load_chexpert(root, size=16)
    assert capsys.readouterr().err == ""  # stderr is not a terminal under pytest: silent

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    rec = cf.data.load_chexpert(root, size=16)
    assert "decoding 3 images" in term.getvalue() and "0/3" in term.getvalue()
    assert rec["image"].shape == (3, 16, 16)
