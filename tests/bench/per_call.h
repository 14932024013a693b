// The benchmarks' one timing rule: a call's cost is the median, over `batches` batches, of a
// batch's time divided by its `calls` calls.
#ifndef CUDAW_BENCH_PER_CALL_H
#define CUDAW_BENCH_PER_CALL_H

#include <algorithm>
#include <chrono>
#include <vector>

template <class F> static double per_call_ns(int batches, int calls, F body)
{
  std::vector<double> v;
  for (int b = 0; b < batches; b++) {
    auto t0 = std::chrono::steady_clock::now();
    body(calls);
    auto t1 = std::chrono::steady_clock::now();
    v.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / calls);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#endif
