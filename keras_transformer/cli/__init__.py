"""The ``kt`` command's programs: each parses its arguments, checks them before TensorFlow is
imported, and calls the library."""
