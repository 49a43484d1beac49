// bbv's CUPTI injection library (loaded by the CUDA driver through CUDA_INJECTION64_PATH, set by
// `bbv gpu run`): per kernel launch, the execution count of every SASS instruction (CUPTI's SASS
// metrics), and the cubin of every module loaded. Launches are serialised: each is synchronised
// and its counts flushed before the application goes on, so counts are per launch.
//
// Needs CUPTI 13.5 or later (scripts/cupti ships it beside bbv): CUDA 13.0's CUPTI (2025.3.1)
// collects the first kernel of a process only, and nothing after its first flush (seen on an
// H200 with driver 580.159.04, in a plain program as in this library).
//
// Environment (set by `bbv gpu run`):
//   BBV_GPU_DIR       folder for launches.txt, metrics.txt and cubins/ (required)
//   BBV_GPU_KERNELS   ECMAScript regex: only launches of kernels whose mangled name matches
//   BBV_GPU_LAUNCHES  A:B: only launches A (inclusive) to B (exclusive), 0-based, B optional
//   BBV_GPU_TIMES     1: a timing run: nothing counted, no launch synchronised, and every
//                     kernel's start and end on the GPU from CUPTI's activity records
//
// launches.txt (text, one record per line, fields separated by one space):
//   bbv-cupti 1
//   chip NAME
//   metric COLUMN NAME                 one per collected metric, in the pc lines' order
//   launch N GX GY GZ BX BY BZ SHMEM STREAM MICROS NAME
//   pc CRC FUNCTION_INDEX PC_OFFSET V1 V2 .. FUNCTION_NAME
//   end N RECORDS
//   module CRC SIZE                    a module loaded; its cubin is cubins/CRC.cubin
//   skipped N GX GY GZ BX BY BZ NAME   a launch outside the chosen ones (not counted)
//   graph N                            a graph launch (its kernels are not counted)
//   error TEXT                         CUPTI refused something: counts after it are missing
//   done LAUNCHES COUNTED              written at exit: the file is complete
//   timing                             (after the header) a timing run: every launch is skipped
//   corr N CORRELATION                 CUPTI's correlation id of launch N (timing runs)
//   graph N CORRELATION                (timing runs: with the graph launch's correlation id)
//   kernel CORRELATION START END REGISTERS STATIC_SHMEM DYNAMIC_SHMEM
//                                      a kernel's run on the GPU (ns, GPU clock), its registers
//                                      per thread and shared memory per block (timing runs)
#include <cuda.h>
#include <cupti.h>
#include <cupti_pcsampling.h>
#include <cupti_profiler_target.h>
#include <cupti_sass_metrics.h>
#include <cupti_target.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace {

// The metrics wanted, in column order; those the chip lacks are left out (metric lines say
// which were collected).
const char *const kWanted[] = {
    "smsp__sass_inst_executed",
    "smsp__sass_thread_inst_executed",
    "smsp__sass_thread_inst_executed_pred_on",
    "smsp__sass_inst_executed_pred_on",
};

struct State {
  std::mutex mu;
  FILE *out = nullptr;
  std::string dir;
  bool has_regex = false;
  std::regex kernels;
  uint64_t first = 0, last = UINT64_MAX;
  uint64_t launches = 0, counted = 0;
  std::set<uint32_t> devices_configured;
  std::vector<uint64_t> metric_ids;
  bool failed = false;
  bool current_selected = false;
  // Contexts with SASS metrics enabled: one range per context for the whole run, flushed after
  // every launch (a range per launch costs a patching per launch).
  std::set<CUcontext> enabled;
  double current_start = 0;
  bool times = false;
  CUresult (*ctx_synchronize)(void) = nullptr;
};

State *g = nullptr;

double now_micros() {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  return tv.tv_sec * 1e6 + tv.tv_usec;
}

const char *result_text(CUptiResult r) {
  const char *s = nullptr;
  cuptiGetResultString(r, &s);
  return s ? s : "unknown CUPTI error";
}

// Records CUPTI's refusal in the output (the host prints it) and on stderr.
void fail(const char *what, CUptiResult r) {
  fprintf(stderr, "bbv-cupti: %s: %s\n", what, result_text(r));
  if (g->out) fprintf(g->out, "error %s: %s\n", what, result_text(r));
  g->failed = true;
}

void write_file(const std::string &path, const void *data, size_t size) {
  FILE *f = fopen((path + ".part").c_str(), "wb");
  if (!f) return;
  bool ok = fwrite(data, 1, size, f) == size;
  ok = fclose(f) == 0 && ok;
  if (ok) rename((path + ".part").c_str(), path.c_str());
}

void on_module_loaded(const CUpti_ResourceData *rd) {
  auto *m = static_cast<const CUpti_ModuleResourceData *>(rd->resourceDescriptor);
  if (!m || !m->pCubin || m->cubinSize == 0) return;
  CUpti_GetCubinCrcParams p = {};
  p.size = CUpti_GetCubinCrcParamsSize;
  p.cubinSize = m->cubinSize;
  p.cubin = m->pCubin;
  CUptiResult r = cuptiGetCubinCrc(&p);
  if (r != CUPTI_SUCCESS) return fail("cuptiGetCubinCrc", r);
  char name[64];
  snprintf(name, sizeof name, "/cubins/%08" PRIx32 ".cubin", (uint32_t)p.cubinCrc);
  std::string path = g->dir + name;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) write_file(path, m->pCubin, m->cubinSize);
  fprintf(g->out, "module %08" PRIx32 " %zu\n", (uint32_t)p.cubinCrc, (size_t)m->cubinSize);
}

// Chooses the metrics once per device (CUPTI keeps the configuration per device index).
bool configure_device(uint32_t device) {
  if (g->devices_configured.count(device)) return true;
  CUpti_Profiler_Initialize_Params init = {CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
  CUptiResult r = cuptiProfilerInitialize(&init);
  if (r != CUPTI_SUCCESS) return fail("cuptiProfilerInitialize", r), false;
  CUpti_Device_GetChipName_Params chip = {CUpti_Device_GetChipName_Params_STRUCT_SIZE};
  chip.deviceIndex = device;
  if ((r = cuptiDeviceGetChipName(&chip)) != CUPTI_SUCCESS)
    return fail("cuptiDeviceGetChipName", r), false;
  fprintf(g->out, "chip %s\n", chip.pChipName);
  CUpti_SassMetrics_GetNumOfMetrics_Params num = {
      CUpti_SassMetrics_GetNumOfMetrics_Params_STRUCT_SIZE};
  num.pChipName = chip.pChipName;
  if ((r = cuptiSassMetricsGetNumOfMetrics(&num)) != CUPTI_SUCCESS)
    return fail("cuptiSassMetricsGetNumOfMetrics", r), false;
  std::vector<CUpti_SassMetrics_MetricDetails> all(num.numOfMetrics);
  CUpti_SassMetrics_GetMetrics_Params list = {CUpti_SassMetrics_GetMetrics_Params_STRUCT_SIZE};
  list.pChipName = chip.pChipName;
  list.numOfMetrics = all.size();
  list.pMetricsList = all.data();
  if ((r = cuptiSassMetricsGetMetrics(&list)) != CUPTI_SUCCESS)
    return fail("cuptiSassMetricsGetMetrics", r), false;
  FILE *mf = fopen((g->dir + "/metrics.txt").c_str(), "w");
  for (auto &m : all)
    if (mf) fprintf(mf, "%s\t%s\n", m.pMetricName, m.pMetricDescription ? m.pMetricDescription : "");
  if (mf) fclose(mf);
  std::vector<CUpti_SassMetrics_Config> configs;
  g->metric_ids.clear();
  for (const char *want : kWanted) {
    for (auto &m : all) {
      if (strcmp(m.pMetricName, want) != 0) continue;
      fprintf(g->out, "metric %zu %s\n", configs.size(), want);
      configs.push_back({m.metricId, CUPTI_SASS_METRICS_OUTPUT_GRANULARITY_GPU});
      g->metric_ids.push_back(m.metricId);
    }
  }
  if (configs.empty()) {
    fprintf(stderr, "bbv-cupti: chip %s has none of the SASS metrics bbv counts with\n",
            chip.pChipName);
    fprintf(g->out, "error chip %s has no instruction-count SASS metric\n", chip.pChipName);
    g->failed = true;
    return false;
  }
  CUpti_SassMetricsSetConfig_Params set = {CUpti_SassMetricsSetConfig_Params_STRUCT_SIZE};
  set.numOfMetricConfig = configs.size();
  set.pConfigs = configs.data();
  set.deviceIndex = device;
  if ((r = cuptiSassMetricsSetConfig(&set)) != CUPTI_SUCCESS)
    return fail("cuptiSassMetricsSetConfig", r), false;
  g->devices_configured.insert(device);
  return true;
}

// Opens the context's one enable range, at its first chosen launch.
bool enable_context(CUcontext ctx) {
  if (g->enabled.count(ctx)) return true;
  uint32_t device = 0;
  CUptiResult r = cuptiGetDeviceId(ctx, &device);
  if (r != CUPTI_SUCCESS) return fail("cuptiGetDeviceId", r), false;
  if (!configure_device(device)) return false;
  CUpti_SassMetricsEnable_Params en = {CUpti_SassMetricsEnable_Params_STRUCT_SIZE};
  en.ctx = ctx;
  // Lazy: a function is patched when it first runs, so unused kernels cost nothing.
  en.enableLazyPatching = 1;
  if ((r = cuptiSassMetricsEnable(&en)) != CUPTI_SUCCESS)
    return fail("cuptiSassMetricsEnable", r), false;
  g->enabled.insert(ctx);
  return true;
}

// Flushes what CUPTI holds for ctx: after a synchronised launch, exactly that launch's counts.
// With `write` false (a launch not chosen) the records are dropped.
size_t flush(CUcontext ctx, bool write) {
  CUpti_SassMetricsGetDataProperties_Params props = {
      CUpti_SassMetricsGetDataProperties_Params_STRUCT_SIZE};
  props.ctx = ctx;
  CUptiResult r = cuptiSassMetricsGetDataProperties(&props);
  if (r != CUPTI_SUCCESS) return fail("cuptiSassMetricsGetDataProperties", r), 0;
  size_t n = props.numOfPatchedInstructionRecords, k = props.numOfInstances;
  if (n == 0 || k == 0) return 0;
  std::vector<CUpti_SassMetrics_Data> data(n);
  std::vector<CUpti_SassMetrics_InstanceValue> values(n * k);
  for (size_t i = 0; i < n; i++) {
    data[i].structSize = sizeof(CUpti_SassMetrics_Data);
    data[i].pInstanceValues = &values[i * k];
  }
  CUpti_SassMetricsFlushData_Params fp = {CUpti_SassMetricsFlushData_Params_STRUCT_SIZE};
  fp.ctx = ctx;
  fp.numOfPatchedInstructionRecords = n;
  fp.numOfInstances = k;
  fp.pMetricsData = data.data();
  if ((r = cuptiSassMetricsFlushData(&fp)) != CUPTI_SUCCESS)
    return fail("cuptiSassMetricsFlushData", r), 0;
  if (!write) return n;
  // CUPTI gives one record per instruction and metric: merge them into one line per instruction.
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::pair<std::string, std::vector<uint64_t>>>
      pcs;
  for (size_t i = 0; i < n; i++) {
    auto &e = pcs[{data[i].cubinCrc, data[i].functionIndex, data[i].pcOffset}];
    if (e.second.empty()) {
      e.first = data[i].functionName ? data[i].functionName : "?";
      e.second.assign(g->metric_ids.size(), 0);
    }
    for (size_t j = 0; j < k; j++)
      for (size_t c = 0; c < e.second.size(); c++)
        if (values[i * k + j].metricId == g->metric_ids[c]) e.second[c] += values[i * k + j].value;
  }
  for (auto &[key, e] : pcs) {
    fprintf(g->out, "pc %08" PRIx32 " %" PRIu32 " %" PRIu32, std::get<0>(key), std::get<1>(key),
            std::get<2>(key));
    for (uint64_t v : e.second) fprintf(g->out, " %" PRIu64, v);
    fprintf(g->out, " %s\n", e.first.c_str());
  }
  return pcs.size();
}

struct Launch {
  CUfunction f = nullptr;
  unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, shmem = 0;
  CUstream stream = nullptr;
};

bool launch_of(CUpti_CallbackId cbid, const void *params, Launch *l) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
      auto *p = static_cast<const cuLaunchKernel_params *>(params);
      *l = {p->f, {p->gridDimX, p->gridDimY, p->gridDimZ},
            {p->blockDimX, p->blockDimY, p->blockDimZ}, p->sharedMemBytes, p->hStream};
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
      auto *p = static_cast<const cuLaunchCooperativeKernel_params *>(params);
      *l = {p->f, {p->gridDimX, p->gridDimY, p->gridDimZ},
            {p->blockDimX, p->blockDimY, p->blockDimZ}, p->sharedMemBytes, p->hStream};
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
      auto *p = static_cast<const cuLaunchKernelEx_params *>(params);
      const CUlaunchConfig *c = p->config;
      if (!c) return false;
      *l = {p->f, {c->gridDimX, c->gridDimY, c->gridDimZ},
            {c->blockDimX, c->blockDimY, c->blockDimZ}, c->sharedMemBytes, c->hStream};
      return true;
    }
    default:
      return false;
  }
}

bool chosen(uint64_t n, const char *name) {
  if (n < g->first || n >= g->last) return false;
  return !g->has_regex || std::regex_search(name ? name : "", g->kernels);
}

void on_launch(const CUpti_CallbackData *cb, CUpti_CallbackId cbid) {
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch ||
      cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz) {
    if (cb->callbackSite != CUPTI_API_ENTER) return;
    if (g->times)
      fprintf(g->out, "graph %" PRIu64 " %" PRIu32 "\n", g->launches, cb->correlationId);
    else
      fprintf(g->out, "graph %" PRIu64 "\n", g->launches);
    return;
  }
  Launch l;
  if (!launch_of(cbid, cb->functionParams, &l)) return;
  const char *name = cb->symbolName ? cb->symbolName : "?";
  if (g->times) {
    // Timed as it runs: no synchronisation, no counting; the activity records give the times.
    if (cb->callbackSite != CUPTI_API_EXIT) return;
    uint64_t n = g->launches++;
    fprintf(g->out, "corr %" PRIu64 " %" PRIu32 "\n", n, cb->correlationId);
    fprintf(g->out, "skipped %" PRIu64 " %u %u %u %u %u %u %s\n", n, l.grid[0], l.grid[1],
            l.grid[2], l.block[0], l.block[1], l.block[2], name);
    return;
  }
  if (cb->callbackSite == CUPTI_API_ENTER) {
    g->current_selected = !g->failed && chosen(g->launches, name) && enable_context(cb->context);
    // Earlier work must not be timed with this launch.
    g->ctx_synchronize();
    g->current_start = now_micros();
    return;
  }
  uint64_t n = g->launches++;
  g->ctx_synchronize();
  double micros = now_micros() - g->current_start;
  if (!g->current_selected) {
    // Counts of a launch not chosen must not land in the next chosen one's.
    if (g->enabled.count(cb->context)) flush(cb->context, false);
    fprintf(g->out, "skipped %" PRIu64 " %u %u %u %u %u %u %s\n", n, l.grid[0], l.grid[1],
            l.grid[2], l.block[0], l.block[1], l.block[2], name);
    return;
  }
  fprintf(g->out, "launch %" PRIu64 " %u %u %u %u %u %u %u %" PRIu64 " %.0f %s\n", n, l.grid[0],
          l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shmem,
          (uint64_t)(uintptr_t)l.stream, micros, name);
  size_t records = flush(cb->context, true);
  fprintf(g->out, "end %" PRIu64 " %zu\n", n, records);
  // A crash later keeps every finished launch.
  fflush(g->out);
  g->counted++;
}

void CUPTIAPI callback(void *, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                       const void *data) {
  std::lock_guard<std::mutex> lock(g->mu);
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED) {
    // A timing run's cubins are the counted run's: not written again.
    if (!g->times) on_module_loaded(static_cast<const CUpti_ResourceData *>(data));
  } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    on_launch(static_cast<const CUpti_CallbackData *>(data), cbid);
  }
}

// Activity buffers (timing runs): CUPTI fills them and hands them back, on its own thread or,
// when flushed, on the flushing one (never while g->mu is held: the handler takes it).
void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t *>(aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t,
                               size_t valid) {
  std::lock_guard<std::mutex> lock(g->mu);
  CUpti_Activity *rec = nullptr;
  while (buffer && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    // The fields read are laid out alike in every version of the kernel record.
    auto *k = reinterpret_cast<const CUpti_ActivityKernel10 *>(rec);
    if (g->out)
      fprintf(g->out, "kernel %" PRIu32 " %" PRIu64 " %" PRIu64 " %u %d %d\n", k->correlationId,
              (uint64_t)k->start, (uint64_t)k->end, (unsigned)k->registersPerThread,
              (int)k->staticSharedMemory, (int)k->dynamicSharedMemory);
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped && g->out)
    fprintf(g->out, "error CUPTI dropped %zu activity records\n", dropped);
  free(buffer);
}

void at_exit() {
  // Outside the lock: the flush hands the last buffers to buffer_completed on this thread.
  if (g->times) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g->mu);
  if (!g->out) return;
  fprintf(g->out, "done %" PRIu64 " %" PRIu64 "\n", g->launches, g->counted);
  fclose(g->out);
  g->out = nullptr;
}

bool parse_range(const char *s) {
  char *end = nullptr;
  g->first = strtoull(s, &end, 10);
  if (end == s || *end != ':') return false;
  const char *b = end + 1;
  if (*b == '\0') return true;
  g->last = strtoull(b, &end, 10);
  return end != b && *end == '\0';
}

}  // namespace

extern "C" int InitializeInjection(void) {
  if (g) return 1;
  g = new State();
  const char *dir = getenv("BBV_GPU_DIR");
  if (!dir || !*dir) {
    fprintf(stderr, "bbv-cupti: BBV_GPU_DIR is not set (run the program with `bbv gpu run`)\n");
    return 0;
  }
  g->dir = dir;
  mkdir((g->dir + "/cubins").c_str(), 0777);
  g->out = fopen((g->dir + "/launches.txt").c_str(), "w");
  if (!g->out) {
    fprintf(stderr, "bbv-cupti: cannot write %s/launches.txt\n", dir);
    return 0;
  }
  fprintf(g->out, "bbv-cupti 1\n");
  fflush(g->out);
  if (const char *re = getenv("BBV_GPU_KERNELS")) {
    try {
      g->kernels = std::regex(re, std::regex::ECMAScript);
      g->has_regex = true;
    } catch (const std::regex_error &) {
      fprintf(g->out, "error BBV_GPU_KERNELS is not a regular expression\n");
      return 0;
    }
  }
  if (const char *r = getenv("BBV_GPU_LAUNCHES")) {
    if (!parse_range(r)) {
      fprintf(g->out, "error BBV_GPU_LAUNCHES must be A:B\n");
      return 0;
    }
  }
  if (const char *t = getenv("BBV_GPU_TIMES")) g->times = strcmp(t, "1") == 0;
  if (g->times) {
    fprintf(g->out, "timing\n");
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r == CUPTI_SUCCESS) r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r != CUPTI_SUCCESS) {
      fail("cuptiActivityEnable", r);
      return 0;
    }
  }
  // The driver loaded this library, so libcuda is there, though maybe not in the global scope.
  void *cuda = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  g->ctx_synchronize = reinterpret_cast<CUresult (*)(void)>(
      dlsym(cuda ? cuda : RTLD_DEFAULT, "cuCtxSynchronize"));
  if (!g->ctx_synchronize) {
    fprintf(g->out, "error cuCtxSynchronize not found in libcuda.so.1\n");
    return 0;
  }
  CUpti_SubscriberHandle sub;
  CUptiResult r = cuptiSubscribe(&sub, callback, nullptr);
  if (r != CUPTI_SUCCESS) {
    fail("cuptiSubscribe", r);
    return 0;
  }
  cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
  const CUpti_CallbackId launches[] = {
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
  };
  for (CUpti_CallbackId id : launches) {
    if ((r = cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, id)) != CUPTI_SUCCESS)
      fail("cuptiEnableCallback", r);
  }
  atexit(at_exit);
  return 1;
}
