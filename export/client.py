"""TF Serving clients for the exported translator, REST and gRPC:
``python -m export.client --rest http://localhost:8501 --model demo "ein Satz"``
``python -m export.client --grpc localhost:8500 --model demo "ein Satz"``
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from typing import Sequence

SIGNATURE = "serving_default"
INPUT_KEY = "inputs"


def rest_payload(sentences: Sequence[str]) -> dict:
    """Body for ``POST /v1/models/<model>:predict`` (columnar "inputs" format)."""
    return {"signature_name": SIGNATURE, "inputs": {INPUT_KEY: list(sentences)}}


def predict_request(sentences: Sequence[str], model_name: str):
    """A ``tensorflow_serving.apis.predict_pb2.PredictRequest`` for the gRPC API."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = SIGNATURE
    request.inputs[INPUT_KEY].CopyFrom(tf.make_tensor_proto(list(sentences), dtype=tf.string))
    return request


def translate_rest(url: str, model_name: str, sentences: Sequence[str], timeout: float = 60.0) -> list[str]:
    body = json.dumps(rest_payload(sentences)).encode("utf-8")
    request = urllib.request.Request(f"{url.rstrip('/')}/v1/models/{model_name}:predict", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        outputs = json.loads(response.read())["outputs"]
    return list(outputs["translations"])


def translate_grpc(target: str, model_name: str, sentences: Sequence[str], timeout: float = 60.0) -> list[str]:
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        response = stub.Predict(predict_request(sentences, model_name), timeout=timeout)
    return [value.decode("utf-8") for value in response.outputs["translations"].string_val]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    server = parser.add_mutually_exclusive_group(required=True)
    server.add_argument("--rest", help="REST base URL, e.g. http://localhost:8501")
    server.add_argument("--grpc", help="gRPC host:port, e.g. localhost:8500")
    parser.add_argument("--model", required=True, help="model name in TF Serving")
    parser.add_argument("sentences", nargs="+")
    args = parser.parse_args(argv)
    if args.rest:
        translations = translate_rest(args.rest, args.model, args.sentences)
    else:
        translations = translate_grpc(args.grpc, args.model, args.sentences)
    print("\n".join(translations))
    return 0


if __name__ == "__main__":
    sys.exit(main())
