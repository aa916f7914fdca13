"""Initializer helper shared by the layers."""

import keras


def clone_initializer(initializer):
    """A fresh copy: one seeded initializer object shared by several weights
    would give them all the same values."""
    return keras.initializers.get(keras.initializers.serialize(initializer))
