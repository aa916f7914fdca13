"""TF Serving clients for the exported translator, REST and gRPC:
``kt client --rest http://localhost:8501 --model demo "ein Satz"``
``kt client --grpc localhost:8500 --model demo "ein Satz"``
"""

from __future__ import annotations

import json
import math
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence

from keras_transformer.cli.common import ArgumentParser, run, setup_logging

PROG = "kt client"

SIGNATURE = "serving_default"
INPUT_KEY = "inputs"


def rest_payload(sentences: Sequence[str]) -> dict:
    """Body for ``POST /v1/models/<model>:predict`` (columnar "inputs" format)."""
    return {"signature_name": SIGNATURE, "inputs": {INPUT_KEY: list(sentences)}}


def predict_request(sentences: Sequence[str], model_name: str):
    """A ``tensorflow_serving.apis.predict_pb2.PredictRequest`` for the gRPC API: the
    request the exporter writes as TF Serving's warm-up (one encoder of it)."""
    from tensorflow_serving.apis import predict_pb2

    from keras_transformer.exporters.serving_files import predict_request_bytes

    return predict_pb2.PredictRequest.FromString(
        predict_request_bytes(sentences, model_name, SIGNATURE)
    )


def translate_rest(
    url: str, model_name: str, sentences: Sequence[str], timeout: float = 60.0
) -> list[str]:
    body = json.dumps(rest_payload(sentences)).encode("utf-8")
    request = urllib.request.Request(
        f"{url.rstrip('/')}/v1/models/{model_name}:predict",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        outputs = json.loads(response.read())["outputs"]
    return list(outputs["translations"])


def translate_grpc(
    target: str, model_name: str, sentences: Sequence[str], timeout: float = 60.0
) -> list[str]:
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        response = stub.Predict(predict_request(sentences, model_name), timeout=timeout)
    return [value.decode("utf-8") for value in response.outputs["translations"].string_val]


class ServerError(Exception):
    """The server could not be reached, or answered with an error."""


def main(argv=None) -> int:
    setup_logging()
    parser = ArgumentParser(PROG, __doc__)
    server = parser.add_mutually_exclusive_group(required=True)
    server.add_argument("--rest", help="REST base URL, e.g. http://localhost:8501")
    server.add_argument(
        "--grpc", help="gRPC host:port, e.g. localhost:8500 (needs tensorflow-serving-api)"
    )
    parser.add_argument("--model", required=True, help="model name in TF Serving")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the server"
    )
    parser.add_argument("sentences", nargs="+")
    args = parser.parse_args(argv)
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        parser.error(f"--timeout must be a finite number of seconds above 0, got {args.timeout}")

    def request() -> int:
        if args.rest:
            try:
                translations = translate_rest(args.rest, args.model, args.sentences, args.timeout)
            except urllib.error.HTTPError as error:
                detail = error.read().decode("utf-8", "replace").strip()
                raise ServerError(
                    f"{args.rest} answered HTTP {error.code}: {detail or error.reason}"
                ) from error
            except (TimeoutError, urllib.error.URLError, ConnectionError) as error:
                reason = getattr(error, "reason", error)
                raise ServerError(
                    f"cannot reach TF Serving at {args.rest} ({reason}); is the server "
                    "running and the REST port right?"
                ) from error
        else:
            try:
                import grpc
            except ImportError as error:
                raise ServerError(
                    "--grpc needs tensorflow-serving-api: "
                    "pip install 'keras-transformer-nmt[serving]'."
                ) from error
            try:
                translations = translate_grpc(args.grpc, args.model, args.sentences, args.timeout)
            except grpc.RpcError as error:
                raise ServerError(
                    f"gRPC call to {args.grpc} failed: {error.code().name}: {error.details()}"
                ) from error
        print("\n".join(translations))
        return 0

    return run(PROG, request, expected=(ServerError, ValueError), library=False)


if __name__ == "__main__":
    sys.exit(main())
