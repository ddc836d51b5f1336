import json, sys, os
from lowbit.bench.registry import BenchContext, discover
from lowbit.bench.timing import copy_bandwidth_gbps, bf16_matmul_tflops, fp8_matmul_tflops
quick = "--full" not in sys.argv
names = [a for a in sys.argv[1:] if not a.startswith("--")]
ctx = BenchContext(copy_gbps=copy_bandwidth_gbps(), bf16_tflops=bf16_matmul_tflops(), fp8_tflops=fp8_matmul_tflops(), quick=quick)
print("ctx", ctx, flush=True)
reg = discover()
rows = []
for n in names:
    try:
        res = reg[n].fn(ctx)
    except Exception as e:
        import traceback; traceback.print_exc(); continue
    for r in res:
        fl = r.floor_us(ctx)
        print(f"{r.op:18s} {r.case:40s} {r.impl:28s} {r.us:10.2f} us  floor {fl:8.2f}  {r.extra}", flush=True)
        rows.append(dict(op=r.op, case=r.case, impl=r.impl, us=r.us, bytes=r.bytes, flops=r.flops, floor_us=fl, extra={k: (v if isinstance(v,(int,float,str)) else str(v)) for k,v in r.extra.items()}))
json.dump(dict(ctx=ctx.__dict__, rows=rows), open(os.path.join(os.environ.get("OUT","."), "bench_" + "_".join(names) + ".json"), "w"), indent=1)
