-- statstorm matrix: wrk script that validates every response and prints, as one JSON line,
-- the validation counters and the latency percentile spectrum.
-- A response fails when its status is not 2xx, when its body length differs from the
-- expected length by more than the tolerance (a fraction of it), or when it lacks the marker.
-- Usage: wrk -s matrix.lua URL -- MARKER EXPECTED_LENGTH TOLERANCE
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  checked, failed, bad_status, bad_length, bad_marker = 0, 0, 0, 0, 0
  marker = args[1] or ""
  want_len = tonumber(args[2]) or 0
  tolerance = tonumber(args[3]) or 0
end

function response(status, headers, body)
  checked = checked + 1
  local bad = false
  if status < 200 or status > 299 then
    bad_status = bad_status + 1
    bad = true
  end
  local n = 0
  if body ~= nil then n = #body end
  if want_len > 0 and math.abs(n - want_len) > tolerance * want_len then
    bad_length = bad_length + 1
    bad = true
  end
  if marker ~= "" and (body == nil or not string.find(body, marker, 1, true)) then
    bad_marker = bad_marker + 1
    bad = true
  end
  if bad then failed = failed + 1 end
end

function done(summary, latency, requests)
  local totals = {checked = 0, failed = 0, bad_status = 0, bad_length = 0, bad_marker = 0}
  for _, t in ipairs(threads) do
    for k, _ in pairs(totals) do
      totals[k] = totals[k] + (t:get(k) or 0)
    end
  end
  local pct = {}
  for p = 1, 99 do
    table.insert(pct, string.format("[%d,%d]", p, latency:percentile(p)))
  end
  for _, p in ipairs({99.5, 99.9, 99.99}) do
    table.insert(pct, string.format("[%g,%d]", p, latency:percentile(p)))
  end
  local e = summary.errors
  io.write(string.format(
    'STATSTORM-MATRIX {"duration_us":%d,"requests":%d,"bytes":%d,"checked":%d,"failed":%d,' ..
    '"bad_status":%d,"bad_length":%d,"bad_marker":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"timeout":%d,"min_us":%d,"max_us":%d,"percentiles_us":[[0,%d],%s,[100,%d]]}\n',
    summary.duration, summary.requests, summary.bytes, totals.checked, totals.failed,
    totals.bad_status, totals.bad_length, totals.bad_marker, e.connect, e.read, e.write,
    e.timeout, latency.min, latency.max, latency.min, table.concat(pct, ","), latency.max))
end
