"""The engines' request-latency histograms as their /metrics show them: time to first token,
inter-token latency and vLLM's prefill time, under each engine's own names, labels and
default buckets (docs/field-notes.md, "The engines' latency metrics")."""

from __future__ import annotations

# vLLM's PrometheusStatLogger (vllm/v1/metrics/loggers.py): labels model_name and engine
VLLM_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0)
# ... and its request phases' (request_prefill_time_seconds among them)
VLLM_REQUEST = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
# SGLang's TokenizerMetricsCollector (the tokenizer manager observes them): label model_name
SGLANG_TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
              0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000,
              8.000)
BUCKETS = {"vllm": (VLLM_TTFT, VLLM_ITL), "sglang": (SGLANG_TTFT, SGLANG_ITL)}
HELP = {"time_to_first_token_seconds": "Histogram of time to first token in seconds.",
        "inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
        "request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for "
                                        "request."}


class Histogram:
    """Counts per upper bound, their sum and count, as prometheus_client keeps them."""

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.sum += value
        self.count += 1
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[index] += 1
                break

    def lines(self, name: str, labels: str) -> list[str]:
        """The exposition lines of name{labels,le=...} (labels: `a="x",b="y"`)."""
        lines, total = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            total += count
            lines.append(f'{name}_bucket{{{labels},le="{bound!r}"}} {float(total)}')
        return [*lines, f'{name}_bucket{{{labels},le="+Inf"}} {float(self.count)}',
                f"{name}_count{{{labels}}} {float(self.count)}",
                f"{name}_sum{{{labels}}} {self.sum}"]


class Latency:
    """One engine's TTFT and inter-token latency histograms (callers hold their own lock)."""

    def __init__(self, engine: str):
        self.engine = engine
        ttft, itl = BUCKETS[engine]
        self.histograms = {"time_to_first_token_seconds": Histogram(ttft),
                           "inter_token_latency_seconds": Histogram(itl)}
        if engine == "vllm":  # SGLang has no prefill-phase histogram of its own
            self.histograms["request_prefill_time_seconds"] = Histogram(VLLM_REQUEST)

    def token(self, seconds: float, first: bool) -> None:
        """A token seconds after the request arrived (first) or after the one before."""
        key = "time_to_first_token_seconds" if first else "inter_token_latency_seconds"
        self.histograms[key].observe(seconds)

    def prefilled(self, seconds: float) -> None:
        """A request's prefill took seconds (vLLM's request_prefill_time_seconds)."""
        if "request_prefill_time_seconds" in self.histograms:
            self.histograms["request_prefill_time_seconds"].observe(seconds)

    def lines(self, model_name: str) -> list[str]:
        labels = f'model_name="{model_name}"' + (',engine="0"' if self.engine == "vllm" else "")
        lines = []
        for metric, histogram in self.histograms.items():
            name = f"{self.engine}:{metric}"
            lines += [f"# HELP {name} {HELP[metric]}", f"# TYPE {name} histogram",
                      *histogram.lines(name, labels)]
        return lines
