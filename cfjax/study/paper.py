"""Paper 000's setup and published numbers, as the study uses them.

The two acquisition sites, the three settings, the metric fields of each table (and which way
more bias should move them), the predictor-seed pairs of the ΔAUC correlations, and the paper's
tables (CheXpert, MIMIC-CXR and CheXpert → MIMIC-CXR) printed beside cfjax's numbers.
"""

from __future__ import annotations

import numpy as np

import cfjax as cf

__all__ = [
    "SITE_A",
    "SITE_B",
    "SETTINGS",
    "STABILITY",
    "RISKS",
    "CALIBRATION",
    "ATTRIBUTES",
    "DELTA_NAMES",
    "SOURCE_FREE",
    "SOURCE_DEPENDENT",
    "PAPER_RISK",
    "PAPER_CALIBRATION",
    "PAPER_STABILITY_A",
]

#: site A: the default acquisition
SITE_A = cf.data.Acquisition()
#: site B: lower gain, higher gamma, more texture noise, a small offset
SITE_B = cf.data.Acquisition(gain=0.85, gamma=1.25, noise=0.07, offset=0.03)
#: the three settings: (name, training site, test set)
SETTINGS = (
    ("A", "A", "balanced test split of site A"),
    ("B", "B", "balanced test split of site B"),
    ("A->B", "A", "natural-demographics test set of site B"),
)
#: the stability fields, and whether more bias should make them larger
STABILITY = (
    ("s_var", True),
    ("s_flip", True),
    ("d_obs", True),
    ("score_shift", True),
    ("spearman", False),
    ("kendall_tau_b", False),
    ("rank_change", True),
)
RISKS = ("risk_orig", "risk_cm", "risk_ie", "cvar_0.5", "cvar_0.25", "cvar_0.1", "risk_wc")
CALIBRATION = (
    "brier_orig",
    "ece_orig",
    "smece_orig",
    "mce_orig",
    "brier_cm",
    "ece_cm",
    "smece_cm",
    "mce_cm",
)
ATTRIBUTES = ("sex", "age_group", "race")
#: the 21 predictor-seed pairs of paper 000's Figure 3 (with 3 seeds)
DELTA_NAMES = ("basic", "sex0.80", "sex0.90", "sex0.95", "age0.80", "age0.90", "age0.95")


# paper 000's numbers
_PAPER_RISK = {
    "A": """0.444 0.501 0.594 1.002 1.326 1.549 1.852
0.445 0.612 0.724 1.027 1.346 1.597 1.845
0.443 0.629 0.771 1.068 1.424 1.699 1.962
0.502 0.677 0.919 1.072 1.431 1.716 1.997
0.453 0.610 0.687 1.192 1.618 1.991 1.390
0.452 0.614 0.699 1.195 1.612 1.968 2.338
0.443 0.614 0.699 1.203 1.622 1.982 2.361
0.494 0.613 0.750 1.126 1.511 1.817 2.111
0.509 0.612 0.754 1.225 1.654 2.007 2.340
0.512 0.613 0.758 1.518 2.046 2.495 2.893
6.33 8.33 8.66 8.33 8.00 8.00 7.33""",
    "B": """0.335 0.425 0.536 0.790 1.031 1.190 1.283
0.342 0.454 0.556 0.827 1.084 1.252 1.351
0.359 0.469 0.590 0.897 1.161 1.370 1.494
0.424 0.511 0.694 0.880 1.181 1.377 1.505
0.375 0.455 0.570 1.055 1.290 1.459 1.563
0.371 0.458 0.583 1.215 1.427 1.580 1.681
0.384 0.459 0.581 1.232 1.499 1.724 1.864
0.335 0.425 0.536 0.857 1.160 1.360 1.549
0.351 0.565 0.734 0.887 1.142 1.370 1.501
0.366 0.610 0.771 0.880 1.191 1.411 1.505
7.00 8.33 8.00 8.00 7.66 7.00 7.33""",
    "A->B": """0.397 0.466 0.549 0.769 0.977 1.121 1.210
0.402 0.486 0.566 0.822 1.055 1.223 1.328
0.422 0.495 0.602 0.913 1.176 1.379 1.506
0.508 0.536 0.722 1.177 1.506 1.778 1.945
0.418 0.497 0.558 0.761 0.941 1.064 1.140
0.395 0.499 0.565 0.793 1.023 1.183 1.281
0.437 0.530 0.597 0.829 1.042 1.193 1.287
0.416 0.490 0.568 0.897 1.056 1.143 1.464
0.422 0.511 0.573 0.809 1.015 1.166 1.563
0.402 0.516 0.614 0.827 1.062 1.233 1.642
6.66 8.00 8.33 8.33 7.66 7.66 7.33""",
}
# columns: marginalised Brier, ECE, MCE, original Brier, ECE, MCE
_PAPER_CALIBRATION = {
    "A": """0.202 0.083 0.171 0.143 0.030 0.080
0.208 0.125 0.219 0.143 0.019 0.077
0.216 0.153 0.240 0.149 0.043 0.121
0.237 0.211 0.306 0.180 0.116 0.228
0.218 0.100 0.184 0.146 0.017 0.046
0.223 0.104 0.232 0.145 0.042 0.119
0.224 0.111 0.233 0.142 0.017 0.078
0.216 0.091 0.164 0.158 0.058 0.104
0.216 0.099 0.159 0.162 0.057 0.089
0.228 0.103 0.171 0.165 0.056 0.079""",
    "B": """0.139 0.088 0.244 0.102 0.012 0.067
0.143 0.111 0.284 0.104 0.029 0.093
0.150 0.136 0.323 0.109 0.050 0.146
0.167 0.179 0.378 0.128 0.091 0.212
0.152 0.126 0.299 0.193 0.133 0.262
0.186 0.128 0.303 0.212 0.154 0.271
0.207 0.135 0.296 0.241 0.181 0.328
0.141 0.094 0.251 0.113 0.039 0.149
0.150 0.105 0.252 0.114 0.049 0.188
0.154 0.138 0.259 0.118 0.042 0.073""",
    "A->B": """0.155 0.059 0.103 0.125 0.056 0.147
0.157 0.074 0.161 0.126 0.030 0.077
0.161 0.096 0.206 0.134 0.019 0.034
0.179 0.150 0.278 0.164 0.075 0.146
0.156 0.061 0.116 0.132 0.075 0.163
0.169 0.061 0.139 0.125 0.065 0.182
0.172 0.076 0.132 0.140 0.072 0.187
0.159 0.063 0.141 0.131 0.040 0.075
0.167 0.064 0.137 0.135 0.028 0.083
0.170 0.096 0.163 0.127 0.015 0.048""",
}
# paper 000's Table 5 (CheXpert, setting 1): s_var, s_flip, score shift (their D_obs), ρ, τ_b, |Δr̄|
_PAPER_STABILITY_A = """0.0396 0.247 0.199 0.691 0.476 913.5
0.0530 0.271 0.216 0.653 0.471 918.4
0.0574 0.289 0.235 0.653 0.469 928.5
0.0685 0.335 0.291 0.641 0.466 934.2
0.0426 0.265 0.218 0.653 0.476 920.6
0.0501 0.256 0.208 0.645 0.479 922.4
0.0489 0.263 0.222 0.644 0.464 932.5
0.0566 0.267 0.203 0.652 0.477 913.3
0.0567 0.270 0.205 0.642 0.466 937.8
0.0567 0.279 0.208 0.589 0.416 1050.2"""


def _table(text: str) -> np.ndarray:
    return np.array([[float(v) for v in line.split()] for line in text.strip().splitlines()])


#: paper 000's risk tables by dataset: ``(11, 7)`` each, the 10 predictors and the CTC row
PAPER_RISK = {k: _table(v) for k, v in _PAPER_RISK.items()}
#: paper 000's calibration tables by dataset: ``(10, 6)`` each (marginalised Brier, ECE, MCE,
#: original Brier, ECE, MCE)
PAPER_CALIBRATION = {k: _table(v) for k, v in _PAPER_CALIBRATION.items()}
#: paper 000's stability table on dataset A: ``(10, 6)``
PAPER_STABILITY_A = _table(_PAPER_STABILITY_A)


# ------------------------------------------------------------------------- exact vs learned
#: metrics of the factual predictions alone: the counterfactual source cannot move them
SOURCE_FREE = ("risk_orig", "brier_orig", "ece_orig", "smece_orig", "mce_orig")
#: the metrics that depend on the counterfactual images, in report order
SOURCE_DEPENDENT = (
    tuple(f for f in RISKS if f not in SOURCE_FREE)
    + tuple(f for f in CALIBRATION if f not in SOURCE_FREE)
    + tuple(f for f, _ in STABILITY)
)
