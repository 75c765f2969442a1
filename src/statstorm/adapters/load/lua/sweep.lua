-- statstorm sweep: wrk script that checks each response body for an expected text (optional)
-- and prints the full latency percentile spectrum plus the error counters as one JSON line.
-- Usage: wrk -s sweep.lua URL -- [EXPECTED_TEXT]
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  mismatches = 0
  expected = args[1]
  if expected == nil or expected == "" then
    response = nil  -- no body check: keep wrk from handing bodies to Lua
  end
end

function response(status, headers, body)
  if body == nil or not string.find(body, expected, 1, true) then
    mismatches = mismatches + 1
  end
end

function done(summary, latency, requests)
  local wrong = 0
  for _, t in ipairs(threads) do
    wrong = wrong + (t:get("mismatches") or 0)
  end
  local pct = {}
  local ps = {1, 5, 10, 20, 25, 30, 40, 50, 60, 70, 75, 80, 90, 95, 99, 99.9, 99.99}
  for _, p in ipairs(ps) do
    table.insert(pct, string.format("[%g,%d]", p, latency:percentile(p)))
  end
  local e = summary.errors
  io.write(string.format(
    'STATSTORM {"duration_us":%d,"requests":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d,"wrong_content":%d,"min_us":%d,"max_us":%d,"mean_us":%.1f,' ..
    '"percentiles_us":[%s]}\n',
    summary.duration, summary.requests, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, wrong, latency.min, latency.max, latency.mean, table.concat(pct, ",")))
end
