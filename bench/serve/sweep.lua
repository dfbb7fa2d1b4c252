-- wrk script for bench/serve/sweep.py: POST "1" to SWEEP_PATH, or round-robin over
-- /run/h1../run/hN when SWEEP_HANDLERS=N; prints one SWEEP line with p50/p99/p99.9 (us).
local n = tonumber(os.getenv("SWEEP_HANDLERS") or "0")
local path = os.getenv("SWEEP_PATH") or "/run/echo"
local i = 0
local hdr = { ["Content-Type"] = "application/json" }

function setup(thread)
  thread:set("i", 0)
end

function request()
  if n > 0 then
    i = (i % n) + 1
    return wrk.format("POST", "/run/h" .. i, hdr, "1")
  end
  return wrk.format("POST", path, hdr, "1")
end

function done(summary, latency, requests)
  io.write(string.format("SWEEP requests=%d duration_us=%d p50=%d p99=%d p999=%d non2xx=%d timeouts=%d connect_err=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency:percentile(99.9), summary.errors.status, summary.errors.timeout, summary.errors.connect))
end
