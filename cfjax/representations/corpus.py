"""A template corpus with true counterfactual sentences, written for cfjax.

Sentences have a person slot and an emotion label (anger, fear, joy, sadness), in the spirit
of the Equity Evaluation Corpus and its EEEC+ extension, but with cfjax's own templates, word
lists and names. Each sentence comes with its true counterfactual: the same template, emotion
word and slot choices with the person (and every pronoun referring to them) swapped to the
other concept value.

* ``concept="gender"``: the person is a noun phrase ("my brother" / "my sister") or a first
  name, paired across genders; pronouns follow.
* ``concept="race"``: the person is a first name associated with European-American or
  African-American people, paired within gender; pronouns are unchanged.

``split="balanced"``: the label is independent of the concept; ``"aggressive"``: with
probability ``bias`` the label comes from the concept's preferred half of the classes (as in
EEEC+'s biased versions), so a classifier trained on it learns to read the concept.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from cfjax import _checks, _results
from cfjax._core.keys import numpy_rng
from cfjax.typing import KeyLike

__all__ = ["EMOTIONS", "TextCorpus", "template_corpus"]

EMOTIONS = ("anger", "fear", "joy", "sadness")

# Emotion states (adjectives describing the person) and situations (adjectives of an event).
_STATES = {
    "anger": ("angry", "furious", "irritated", "enraged", "annoyed", "outraged"),
    "fear": ("afraid", "scared", "anxious", "terrified", "nervous", "frightened"),
    "joy": ("happy", "glad", "delighted", "cheerful", "thrilled", "overjoyed"),
    "sadness": ("sad", "miserable", "heartbroken", "gloomy", "downcast", "devastated"),
}
_SITUATIONS = {
    "anger": ("infuriating", "outrageous", "insulting", "maddening"),
    "fear": ("terrifying", "frightening", "alarming", "menacing"),
    "joy": ("wonderful", "delightful", "marvellous", "uplifting"),
    "sadness": ("depressing", "heartbreaking", "tragic", "dismal"),
}
# {P}: the person; {S}/{O}/{D}: subject, object and possessive pronouns; {E}: a state; {T}: a situation.
_TEMPLATES = (
    "{P} feels {E}.",
    "{P} was {E} when the letter arrived.",
    "The news left {P} {E}.",
    "{P} said that {S} was {E} about the decision.",
    "After the meeting, {P} looked {E}.",
    "{P} told {D} friends about the {T} day.",
    "I spoke with {P}, and {S} sounded {E}.",
    "It was a {T} evening for {P}.",
    "Everyone could see that {P} was {E}.",
    "{P} wrote to {D} family about a {T} trip.",
    "We met {P} yesterday; {S} seemed {E}.",
    "{P} found the whole story {T}.",
    "Nobody expected {P} to be so {E}.",
    "{P} got a {T} phone call this week.",
    "I gave {O} the results, and {P} became {E}.",
    "{P} described a {T} encounter on the train.",
)
# Gendered noun phrases, paired by position (male, female).
_PHRASES = (
    ("my brother", "my sister"),
    ("this man", "this woman"),
    ("my father", "my mother"),
    ("my son", "my daughter"),
    ("my husband", "my wife"),
    ("my uncle", "my aunt"),
    ("the boy", "the girl"),
    ("my boyfriend", "my girlfriend"),
    ("my grandfather", "my grandmother"),
    ("the gentleman", "the lady"),
)
# First names, paired by position across race within gender: (European-American, African-American).
_NAMES = {
    "male": (
        ("Brad", "Darnell"),
        ("Connor", "Jamal"),
        ("Jake", "Tyrone"),
        ("Todd", "Malik"),
        ("Greg", "Terrell"),
        ("Neil", "DeShawn"),
        ("Luke", "Lamar"),
        ("Wyatt", "Jerome"),
    ),
    "female": (
        ("Emily", "Aisha"),
        ("Claire", "Ebony"),
        ("Katie", "Keisha"),
        ("Megan", "Latoya"),
        ("Allison", "Tamika"),
        ("Heather", "Imani"),
        ("Laurie", "Shanice"),
        ("Molly", "Latisha"),
    ),
}
_PRONOUNS = {"male": ("he", "him", "his"), "female": ("she", "her", "her")}


class TextCorpus(NamedTuple):
    """Sentences, their true counterfactuals and codes; row i is the couple ``(s_i, z_cf_i)``.

    ``texts``/``texts_cf``: lists of n strings; ``y (n,)``: emotion codes (``EMOTIONS``);
    ``z (n,)``, ``z_cf (n,)``: concept codes (gender: 0 male, 1 female; race: 0
    European-American, 1 African-American); ``concept``, ``values``: names.
    """

    texts: list
    texts_cf: list
    y: np.ndarray
    z: np.ndarray
    z_cf: np.ndarray
    concept: str
    values: tuple

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain Python (lists of numbers and strings) for ``json.dumps``."""
        return {f: _results.plain(getattr(self, f)) for f in self._fields}

    def __repr__(self) -> str:
        return _results.fields_repr(
            type(self).__name__, ((f, _results.sized(getattr(self, f))) for f in self._fields)
        )


def _render(template: str, person: str, gender: str, state: str, situation: str) -> str:
    s, o, d = _PRONOUNS[gender]
    text = template.format(P=person, S=s, O=o, D=d, E=state, T=situation)
    return text[0].upper() + text[1:]


def template_corpus(
    n: int, *, concept: str = "gender", split: str = "balanced", bias: float = 0.9, key: KeyLike = 0
) -> TextCorpus:
    """Draw ``n`` sentences with their true counterfactual sentences.

    Args:
        n: sentences.
        concept: ``"gender"`` or ``"race"``.
        split: ``"balanced"`` or ``"aggressive"`` (the label follows the concept with
            probability ``bias``).
        bias: see ``split``.
        key: a PRNG key, raw key data or an int seed ``s`` (drawn with
            ``np.random.default_rng(s)``; ``jax.random.key(s)`` gives the same corpus).

    Returns:
        :class:`TextCorpus` of the ``n`` sentences and their counterfactual sentences.

    Raises:
        ValidationError: a bad ``n``, ``concept``, ``split``, ``bias`` or ``key``.

    Example:
        >>> c = template_corpus(3, key=1)
        >>> len(c.texts), c.values
        (3, ('male', 'female'))
    """
    n = _checks.check_positive_int("n", n)
    if concept not in ("gender", "race"):
        _checks.fail("concept", "'gender' or 'race'", repr(concept))
    if split not in ("balanced", "aggressive"):
        _checks.fail("split", "'balanced' or 'aggressive'", repr(split))
    if not 0.0 <= bias <= 1.0:
        _checks.fail("bias", "a probability in [0, 1]", repr(bias))
    rng = numpy_rng(key)
    C = len(EMOTIONS)
    z = rng.integers(0, 2, n)
    y = rng.integers(0, C, n)
    if split == "aggressive":
        prefer = rng.random(n) < bias
        # Concept value v prefers the classes c with c % 2 == v (anger/joy vs fear/sadness).
        y = np.where(prefer, 2 * rng.integers(0, C // 2, n) + z, y)
    texts, texts_cf = [], []
    for i in range(n):
        template = _TEMPLATES[rng.integers(len(_TEMPLATES))]
        emotion = EMOTIONS[y[i]]
        state = _STATES[emotion][rng.integers(len(_STATES[emotion]))]
        situation = _SITUATIONS[emotion][rng.integers(len(_SITUATIONS[emotion]))]
        if concept == "gender":
            if rng.random() < 0.5:
                pair = _PHRASES[rng.integers(len(_PHRASES))]
            else:
                race = rng.integers(2)
                j = rng.integers(len(_NAMES["male"]))
                pair = (_NAMES["male"][j][race], _NAMES["female"][j][race])
            genders = ("male", "female")
            texts.append(_render(template, pair[z[i]], genders[z[i]], state, situation))
            texts_cf.append(_render(template, pair[1 - z[i]], genders[1 - z[i]], state, situation))
        else:
            gender = ("male", "female")[rng.integers(2)]
            pair = _NAMES[gender][rng.integers(len(_NAMES[gender]))]
            texts.append(_render(template, pair[z[i]], gender, state, situation))
            texts_cf.append(_render(template, pair[1 - z[i]], gender, state, situation))
    values = (
        ("male", "female") if concept == "gender" else ("European-American", "African-American")
    )
    return TextCorpus(
        texts=texts,
        texts_cf=texts_cf,
        y=y.astype(np.int32),
        z=z.astype(np.int32),
        z_cf=(1 - z).astype(np.int32),
        concept=concept,
        values=values,
    )
