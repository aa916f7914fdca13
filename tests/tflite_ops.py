"""The operators of a TFLite flatbuffer, to check that a model runs on stock LiteRT."""

from __future__ import annotations


def op_names(flatbuffer: bytes) -> tuple[set, set]:
    """``(builtins, customs)``: the builtin operators' names and the custom (Flex) ops' codes."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(flatbuffer))
    builtin_names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    builtins, customs = set(), set()
    for code in model.operatorCodes:
        if code.customCode:
            customs.add(
                code.customCode.decode() if isinstance(code.customCode, bytes) else code.customCode
            )
        else:
            builtins.add(builtin_names[max(code.builtinCode, code.deprecatedBuiltinCode)])
    return builtins, customs
