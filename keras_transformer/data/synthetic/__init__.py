"""A deterministic toy language pair for the offline demo: English-like → "Kestan".

Real corpora cannot ship with the package and take hours to learn, so the demo
trains on this invented pair instead. It is small (a few hundred stems) but
needs the skills that make translation hard, so a model that scores well on it
has learned more than copying:

* **Reordering.** The source is SVO, the target SOV::

      [time] subject verb [object] [to indirect-object] [manner]       (source)
      [time] subject [indirect-object] [object] [manner] verb          (target)

  Inside a noun phrase the target puts adjectives *after* the noun in mirror
  order, the number after the adjectives, and a relative clause *before* the
  noun as a participle ("the 3 big red cats that sleep" → "dormik mirki ruso
  grando 3"). "S1 because S2" becomes "S2 kos S1".
* **Agreement.** The target verb is ``[ne]stem + tense + person``: tense infix
  ``""``/``ra``/``sa`` (present/past/future) and suffix ``m s t mos tis nt``
  (1sg 2sg 3sg 1pl 2pl 3pl). English marks person only in the present 3sg and
  by "do/does/did not", so the model has to read it off the subject.
* **Case and number.** Nouns are ``stem + a|i`` (singular|plural), adjectives
  ``stem + e|o`` agreeing in number, and both take a case suffix: nominative
  ``""``, accusative ``n``, dative ``l`` (the source's "to the X").
  Pronouns have their own case forms; articles are dropped.
* **Copying.** Digits are copied verbatim (and moved).

The generator samples one structure (:class:`Sentence`) and renders both
sides from it, so the target is a function of the source and exact-match
accuracy is meaningful. Example::

    source: yesterday 3 red cats gave an old book to the teacher quickly
    target: hieru mirki ruso 3 lerkal libran vetren raspu donarant
"""
