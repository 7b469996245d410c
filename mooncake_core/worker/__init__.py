"""Worker compute core: tiny Llama model, paged KV cache, engine, CPP stages, profiling.

Everything here runs in one process with torch (CPU, or CUDA when present); the worker
processes, the Store and the Transfer Engine wrap it. See ``docs/worker.md``.
"""

from mooncake_core.worker.cpp import (
    CppOptions,
    CppPrefillGroup,
    CppResult,
    PipelineStage,
    split_layers,
)
from mooncake_core.worker.engine import InferenceEngine
from mooncake_core.worker.kvcache import CacheFullError, CacheSnapshot, PagedKVCache
from mooncake_core.worker.model import TinyLlama, torch_dtype
from mooncake_core.worker.profile import WorkerProfile, profile_document, profile_engine
from mooncake_core.worker.results import (
    EngineSnapshot,
    EngineStats,
    LayerKVEvent,
    LayerKVHook,
    PrefillResult,
    SequenceKV,
)
from mooncake_core.worker.sampling import Sampler, SamplingParams
from mooncake_core.worker.tokenizer import BOS, EOS, PAD, VOCAB_SIZE, ByteTokenizer

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "VOCAB_SIZE",
    "ByteTokenizer",
    "CacheFullError",
    "CacheSnapshot",
    "CppOptions",
    "CppPrefillGroup",
    "CppResult",
    "EngineSnapshot",
    "EngineStats",
    "InferenceEngine",
    "LayerKVEvent",
    "LayerKVHook",
    "PagedKVCache",
    "PipelineStage",
    "PrefillResult",
    "Sampler",
    "SamplingParams",
    "SequenceKV",
    "TinyLlama",
    "WorkerProfile",
    "profile_document",
    "profile_engine",
    "split_layers",
    "torch_dtype",
]
