"""CheXpert and MIMIC-CXR-JPG adapters on tiny fake datasets written in their exact formats."""

import csv

import numpy as np
import pytest
from PIL import Image

import cfjax as cf

OBSERVATIONS = ["No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity",
                "Lung Lesion", "Edema", "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax",
                "Pleural Effusion", "Pleural Other", "Fracture", "Support Devices"]


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def write_image(path, rng, fmt):
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = rng.integers(0, 256, (40, 30)).astype(np.uint8)
    Image.fromarray(pixels, "L").save(path, format=fmt)
    return pixels


def expected_image(pixels, size):
    im = Image.fromarray(pixels, "L").resize((size, size), Image.BILINEAR)
    return np.asarray(im, np.float32) / 255


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
    write_csv(root / "train.csv", ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA"] + OBSERVATIONS, rows)
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


def test_chexpert_cache_round_trip(chexpert, tmp_path):
    root, *_ = chexpert
    first = cf.data.load_chexpert(root, size=16, cache_dir=tmp_path / "cache")
    assert len(list((tmp_path / "cache").glob("images-*.npy"))) == 1
    second = cf.data.load_chexpert(root, size=16, cache_dir=tmp_path / "cache")
    np.testing.assert_array_equal(first["image"], second["image"])


def test_chexpert_errors_name_the_file_and_column(chexpert, tmp_path):
    root, rows, _ = chexpert
    with pytest.raises(ValueError, match="valid.csv"):
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


def test_mimic_records_match_the_files(tmp_path, rng):
    root = tmp_path / "mimic-cxr-jpg"
    meta, labels, pixels = [], [], {}
    spec = [("10000032", "50414267", "d1", "PA", "1.0"), ("10000032", "50414267", "d2", "LATERAL", "1.0"),
            ("10000764", "57375967", "d3", "AP", "0.0"), ("10000898", "50771383", "d4", "PA", "-1.0"),
            ("11111111", "52222222", "d5", "PA", "")]
    for subject, study, dicom, view, eff in spec:
        path = root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" / f"{dicom}.jpg"
        pixels[dicom] = write_image(path, rng, "JPEG")
        meta.append([dicom, subject, study, "CHEST (PA AND LAT)", view, 3056, 2544])
        obs = [""] * len(OBSERVATIONS)
        obs[OBSERVATIONS.index("Pleural Effusion")] = eff
        labels.append([subject, study] + obs)
    write_csv(root / "mimic-cxr-2.0.0-metadata.csv",
              ["dicom_id", "subject_id", "study_id", "PerformedProcedureStepDescription", "ViewPosition", "Rows", "Columns"], meta)
    write_csv(root / "mimic-cxr-2.0.0-chexpert.csv", ["subject_id", "study_id"] + OBSERVATIONS, labels)
    patients = tmp_path / "patients.csv"
    write_csv(patients, ["subject_id", "gender", "anchor_age", "anchor_year", "anchor_year_group", "dod"],
              [["10000032", "F", 52, 2180, "2014 - 2016", ""], ["10000764", "M", 86, 2132, "2014 - 2016", ""],
               ["10000898", "F", 33, 2187, "2011 - 2013", ""]])
    rec = cf.data.load_mimic_cxr(root, patients, size=12)
    assert rec["parents"]["sex"].tolist() == [1, 0]
    assert rec["parents"]["age"].tolist() == [52, 86]
    assert rec["parents"]["effusion"].tolist() == [1, 0]
    assert rec["dropped"] == {"not frontal": 1, "effusion uncertain": 1, "no patient record": 1}
    # JPEG is lossy: compare with Pillow's own decoding of the written file.
    for i in range(2):
        with Image.open(rec["path"][i]) as im:
            want = np.asarray(im.convert("L").resize((12, 12), Image.BILINEAR), np.float32) / 255
        np.testing.assert_array_equal(rec["image"][i], want)
    with pytest.raises(ValueError, match="patients.csv.*missing column 'anchor_age'"):
        write_csv(patients, ["subject_id", "gender"], [["10000032", "F"]])
        cf.data.load_mimic_cxr(root, patients)
