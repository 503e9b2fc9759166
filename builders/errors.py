"""Build failures as (reason, message): a CamelCase reason the operator copies onto a condition."""

from __future__ import annotations

#: The model could not be downloaded or read (network error, HTTP error, missing file).
MODEL_UNREACHABLE = "ModelUnreachable"
#: The source refused the build's credentials (HTTP 401/403; S3 AccessDenied, InvalidAccessKeyId,
#: SignatureDoesNotMatch): the Secret's keys are wrong, or they may not read this object.
MODEL_ACCESS_DENIED = "ModelAccessDenied"
#: The source answered, but holds no such object (HTTP 404; S3 NoSuchKey, NoSuchBucket).
MODEL_NOT_FOUND = "ModelNotFound"
#: The request names a credentials Secret, but its keys are not mounted (no such Secret, or it
#: lacks the keys the source needs); or it names none, and the pod has no identity of its own.
MODEL_CREDENTIALS_MISSING = "ModelCredentialsMissing"
#: The request names a private CA's ConfigMap, but no bundle is mounted at its key (no such
#: ConfigMap, or another key).
MODEL_CA_BUNDLE_MISSING = "ModelCABundleMissing"
#: The downloaded bytes do not hash to the requested sha256.
MODEL_CHECKSUM_MISMATCH = "ModelChecksumMismatch"
#: An https model URI without the mandatory sha256.
MODEL_CHECKSUM_REQUIRED = "ModelChecksumRequired"
#: Not an ONNX model, or one that fails the ONNX checker / shape inference.
INVALID_MODEL = "InvalidModel"
#: The request's shape profile or batching bounds contradict the model's inputs.
SHAPE_PROFILE_MISMATCH = "ShapeProfileMismatch"
#: The precision needs calibration data (TensorRT INT8) and none was given.
CALIBRATION_REQUIRED = "CalibrationRequired"
#: Calibration data that cannot be read or does not fit the model.
INVALID_CALIBRATION_DATA = "InvalidCalibrationData"
#: The backend/precision/target combination is not supported.
UNSUPPORTED_PRECISION = "UnsupportedPrecision"
#: The target cannot run this backend (TensorRT on "cpu"), or the build runs on another GPU product.
UNSUPPORTED_TARGET = "UnsupportedTarget"
#: The serving variant cannot serve this backend (the python variant wraps ONNX Runtime only).
UNSUPPORTED_SERVING_VARIANT = "UnsupportedServingVariant"
#: A TensorRT build was requested where TensorRT (trtexec) is not installed.
TENSORRT_UNAVAILABLE = "TensorRTUnavailable"
#: The engine build tool itself failed.
ENGINE_BUILD_FAILED = "EngineBuildFailed"
#: The URI scheme is unknown or its client library is missing.
UNSUPPORTED_URI = "UnsupportedModelUri"
#: The model (or calibration) file is larger than the build fetches (`fetch.MAX_FETCH_BYTES`).
MODEL_TOO_LARGE = "ModelTooLarge"
#: The built engine could not be served or measured.
PROFILE_FAILED = "ProfileFailed"
#: The request document itself is invalid.
INVALID_REQUEST = "InvalidBuildRequest"
#: The engine's outputs stray from the FP32 reference's beyond the request's tolerance.
ACCURACY_OUT_OF_TOLERANCE = "AccuracyOutOfTolerance"
#: The profile request document is invalid.
INVALID_PROFILE_REQUEST = "InvalidProfileRequest"
#: The engine a profile Job was asked to measure is not in the store.
ENGINE_NOT_FOUND = "EngineNotFound"
#: A successful build's result (its tensors) does not fit the termination message the operator reads.
BUILD_RESULT_TOO_LARGE = "BuildResultTooLarge"
#: The engine store's volume (or the build's scratch space) ran out of space while the build wrote;
#: nothing was published. Retried with back-off: a later build's GC, or an administrator, can free it.
ENGINE_STORE_FULL = "EngineStoreFull"


#: How much of what a source's server said a failure message quotes.
QUOTED_CHARS = 300


def quoted(text: str, *, limit: int = QUOTED_CHARS) -> str:
    """A server's words, fit for a message: printable characters only (others as '?'), at most `limit`.

    Whatever a model source answers (an S3 error's code and text, a registry's error codes, a Hub's
    error headers) is the server's to choose; it reaches the object's conditions and Events only
    through here.
    """
    shown = "".join(ch if ch.isprintable() else "?" for ch in text[: limit + 1])
    return shown if len(shown) <= limit else shown[:limit] + " [...]"


class BuildError(Exception):
    """A build failure the user can act on."""

    def __init__(self, reason: str, message: str) -> None:
        """Record the CamelCase `reason` and a sentence `message` naming the problem."""
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
