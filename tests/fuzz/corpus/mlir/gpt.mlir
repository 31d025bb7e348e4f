#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
module attributes {dtm.mesh_axes = ["pp", "dp", "tp"], dtm.model = "gpt", dtm.train = "train optimizer = \22adamw\22, lr = 0.001, beta1 = 0.9, beta2 = 0.95, eps = 1e-08, weight_decay = 0.1, clip = 1, momentum = 0, nesterov = false\0Atrain lr_schedule = \22cosine\22, warmup = 20, min_lr = 0.0001\0Atrain zero = 0, zero_axes = (dp), reshard_after_forward = true\0Atrain microbatches = 1, schedule = \221f1b\22, virtual_stages = 1, precision = f32, reduce_dtype = f32, master_dtype = f32\0Atrain steps = 300, data = \22synthetic\22, seed = 0\0Atrain sequence_parallel = false, recompute = false, uneven_shards = true, bucket_bytes = 26214400, prefetch = 1\0A"} {
  mesh.mesh @mesh(shape = 1x2x2)
  func.func private @dtm.embed.0(tensor<256x64xf32>, tensor<8x32xi32>) -> tensor<8x32x64xf32>
  func.func private @dtm.layernorm.0(tensor<8x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
  func.func private @dtm.attention.0(tensor<8x32x64xf32>, tensor<8x32x64xf32>, tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
  func.func private @dtm.gelu.0(tensor<8x32x256xf32>) -> tensor<8x32x256xf32>
  func.func private @dtm.cross_entropy.0(tensor<8x32x256xf32>, tensor<8x32xi32>) -> tensor<f32>
  func.func @forward(%arg0: tensor<8x32xi32> {dtm.name = "tokens", dtm.role = "input"}, %arg1: tensor<8x32xi32> {dtm.name = "targets", dtm.role = "input"}, %arg2: tensor<256x64xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.name = "wte", dtm.role = "param"}, %arg3: tensor<32x64xf32> {dtm.attr = "{init = normal(0, 0.01)}", dtm.name = "wpe", dtm.role = "param"}, %arg4: tensor<64xf32> {dtm.attr = "{init = ones}", dtm.name = "lnf", dtm.role = "param"}, %arg5: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.name = "lnfb", dtm.role = "param"}, %arg6: tensor<64xf32> {dtm.attr = "{init = ones}", dtm.block = 0 : i64, dtm.name = "layer.0.ln1", dtm.role = "param", dtm.stage = 0 : i64}, %arg7: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 0 : i64, dtm.name = "layer.0.ln1b", dtm.role = "param", dtm.stage = 0 : i64}, %arg8: tensor<64x64xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 0 : i64, dtm.name = "layer.0.wq", dtm.role = "param", dtm.stage = 0 : i64}, %arg9: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 0 : i64, dtm.name = "layer.0.bq", dtm.role = "param", dtm.stage = 0 : i64}, %arg10: tensor<64x64xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 0 : i64, dtm.name = "layer.0.wk", dtm.role = "param", dtm.stage = 0 : i64}, %arg11: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 0 : i64, dtm.name = "layer.0.bk", dtm.role = "param", dtm.stage = 0 : i64}, %arg12: tensor<64x64xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 0 : i64, dtm.name = "layer.0.wv", dtm.role = "param", dtm.stage = 0 : i64}, %arg13: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 0 : i64, dtm.name = "layer.0.bv", dtm.role = "param", dtm.stage = 0 : i64}, %arg14: tensor<64x64xf32> {dtm.attr = "{init = normal(0, 0.01)}", dtm.block = 0 : i64, dtm.name = "layer.0.wo", dtm.role = "param", dtm.stage = 0 : i64}, %arg15: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 0 : i64, dtm.name = "layer.0.bo", dtm.role = "param", dtm.stage = 0 : i64}, %arg16: tensor<64xf32> {dtm.attr = "{init = ones}", dtm.block = 0 : i64, dtm.name = "layer.0.ln2", dtm.role = "param", dtm.stage = 0 : i64}, %arg17: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 0 : i64, dtm.name = "layer.0.ln2b", dtm.role = "param", dtm.stage = 0 : i64}, %arg18: tensor<64x256xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 0 : i64, dtm.name = "layer.0.wfc", dtm.role = "param", dtm.stage = 0 : i64}, %arg19: tensor<256xf32> {dtm.attr = "{init = zeros}", dtm.block = 0 : i64, dtm.name = "layer.0.bfc", dtm.role = "param", dtm.stage = 0 : i64}, %arg20: tensor<256x64xf32> {dtm.attr = "{init = normal(0, 0.01)}", dtm.block = 0 : i64, dtm.name = "layer.0.wproj", dtm.role = "param", dtm.stage = 0 : i64}, %arg21: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 0 : i64, dtm.name = "layer.0.bproj", dtm.role = "param", dtm.stage = 0 : i64}, %arg22: tensor<64xf32> {dtm.attr = "{init = ones}", dtm.block = 1 : i64, dtm.name = "layer.1.ln1", dtm.role = "param", dtm.stage = 0 : i64}, %arg23: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 1 : i64, dtm.name = "layer.1.ln1b", dtm.role = "param", dtm.stage = 0 : i64}, %arg24: tensor<64x64xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 1 : i64, dtm.name = "layer.1.wq", dtm.role = "param", dtm.stage = 0 : i64}, %arg25: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 1 : i64, dtm.name = "layer.1.bq", dtm.role = "param", dtm.stage = 0 : i64}, %arg26: tensor<64x64xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 1 : i64, dtm.name = "layer.1.wk", dtm.role = "param", dtm.stage = 0 : i64}, %arg27: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 1 : i64, dtm.name = "layer.1.bk", dtm.role = "param", dtm.stage = 0 : i64}, %arg28: tensor<64x64xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 1 : i64, dtm.name = "layer.1.wv", dtm.role = "param", dtm.stage = 0 : i64}, %arg29: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 1 : i64, dtm.name = "layer.1.bv", dtm.role = "param", dtm.stage = 0 : i64}, %arg30: tensor<64x64xf32> {dtm.attr = "{init = normal(0, 0.01)}", dtm.block = 1 : i64, dtm.name = "layer.1.wo", dtm.role = "param", dtm.stage = 0 : i64}, %arg31: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 1 : i64, dtm.name = "layer.1.bo", dtm.role = "param", dtm.stage = 0 : i64}, %arg32: tensor<64xf32> {dtm.attr = "{init = ones}", dtm.block = 1 : i64, dtm.name = "layer.1.ln2", dtm.role = "param", dtm.stage = 0 : i64}, %arg33: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 1 : i64, dtm.name = "layer.1.ln2b", dtm.role = "param", dtm.stage = 0 : i64}, %arg34: tensor<64x256xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 1 : i64, dtm.name = "layer.1.wfc", dtm.role = "param", dtm.stage = 0 : i64}, %arg35: tensor<256xf32> {dtm.attr = "{init = zeros}", dtm.block = 1 : i64, dtm.name = "layer.1.bfc", dtm.role = "param", dtm.stage = 0 : i64}, %arg36: tensor<256x64xf32> {dtm.attr = "{init = normal(0, 0.01)}", dtm.block = 1 : i64, dtm.name = "layer.1.wproj", dtm.role = "param", dtm.stage = 0 : i64}, %arg37: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.block = 1 : i64, dtm.name = "layer.1.bproj", dtm.role = "param", dtm.stage = 0 : i64}) -> tensor<f32> {
    %sharding_annotated = mesh.shard %arg0 to <@mesh, [[1]]> : tensor<8x32xi32>
    %sharding_annotated_0 = mesh.shard %arg1 to <@mesh, [[1]]> : tensor<8x32xi32>
    %sharding_annotated_1 = mesh.shard %arg2 to <@mesh, [[2]]> : tensor<256x64xf32>
    %sharding_annotated_2 = mesh.shard %arg8 to <@mesh, [[], [2]]> : tensor<64x64xf32>
    %sharding_annotated_3 = mesh.shard %arg9 to <@mesh, [[2]]> : tensor<64xf32>
    %sharding_annotated_4 = mesh.shard %arg10 to <@mesh, [[], [2]]> : tensor<64x64xf32>
    %sharding_annotated_5 = mesh.shard %arg11 to <@mesh, [[2]]> : tensor<64xf32>
    %sharding_annotated_6 = mesh.shard %arg12 to <@mesh, [[], [2]]> : tensor<64x64xf32>
    %sharding_annotated_7 = mesh.shard %arg13 to <@mesh, [[2]]> : tensor<64xf32>
    %sharding_annotated_8 = mesh.shard %arg14 to <@mesh, [[2]]> : tensor<64x64xf32>
    %sharding_annotated_9 = mesh.shard %arg18 to <@mesh, [[], [2]]> : tensor<64x256xf32>
    %sharding_annotated_10 = mesh.shard %arg19 to <@mesh, [[2]]> : tensor<256xf32>
    %sharding_annotated_11 = mesh.shard %arg20 to <@mesh, [[2]]> : tensor<256x64xf32>
    %sharding_annotated_12 = mesh.shard %arg24 to <@mesh, [[], [2]]> : tensor<64x64xf32>
    %sharding_annotated_13 = mesh.shard %arg25 to <@mesh, [[2]]> : tensor<64xf32>
    %sharding_annotated_14 = mesh.shard %arg26 to <@mesh, [[], [2]]> : tensor<64x64xf32>
    %sharding_annotated_15 = mesh.shard %arg27 to <@mesh, [[2]]> : tensor<64xf32>
    %sharding_annotated_16 = mesh.shard %arg28 to <@mesh, [[], [2]]> : tensor<64x64xf32>
    %sharding_annotated_17 = mesh.shard %arg29 to <@mesh, [[2]]> : tensor<64xf32>
    %sharding_annotated_18 = mesh.shard %arg30 to <@mesh, [[2]]> : tensor<64x64xf32>
    %sharding_annotated_19 = mesh.shard %arg34 to <@mesh, [[], [2]]> : tensor<64x256xf32>
    %sharding_annotated_20 = mesh.shard %arg35 to <@mesh, [[2]]> : tensor<256xf32>
    %sharding_annotated_21 = mesh.shard %arg36 to <@mesh, [[2]]> : tensor<256x64xf32>
    %0 = call @dtm.embed.0(%sharding_annotated_1, %sharding_annotated) : (tensor<256x64xf32>, tensor<8x32xi32>) -> tensor<8x32x64xf32>
    %1 = tensor.empty() : tensor<8x32x64xf32>
    %broadcasted = linalg.broadcast ins(%arg3 : tensor<32x64xf32>) outs(%1 : tensor<8x32x64xf32>) dimensions = [0] 
    %2 = arith.addf %0, %broadcasted {dtm.name = "x"} : tensor<8x32x64xf32>
    %3 = call @dtm.layernorm.0(%2, %arg6, %arg7) {dtm.attr = "{eps = 1e-05}", dtm.block = 0 : i64, dtm.name = "layer.0.h", dtm.stage = 0 : i64} : (tensor<8x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %4 = tensor.empty() : tensor<8x32x64xf32>
    %5 = linalg.fill ins(%cst : f32) outs(%4 : tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%3, %sharding_annotated_2 : tensor<8x32x64xf32>, tensor<64x64xf32>) outs(%5 : tensor<8x32x64xf32>) attrs =  {dtm.block = 0 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x64xf32>
    %7 = tensor.empty() : tensor<8x32x64xf32>
    %broadcasted_22 = linalg.broadcast ins(%sharding_annotated_3 : tensor<64xf32>) outs(%7 : tensor<8x32x64xf32>) dimensions = [0, 1] 
    %8 = arith.addf %6, %broadcasted_22 {dtm.block = 0 : i64, dtm.name = "layer.0.q", dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %cst_23 = arith.constant 0.000000e+00 : f32
    %9 = tensor.empty() : tensor<8x32x64xf32>
    %10 = linalg.fill ins(%cst_23 : f32) outs(%9 : tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%3, %sharding_annotated_4 : tensor<8x32x64xf32>, tensor<64x64xf32>) outs(%10 : tensor<8x32x64xf32>) attrs =  {dtm.block = 0 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x64xf32>
    %12 = tensor.empty() : tensor<8x32x64xf32>
    %broadcasted_24 = linalg.broadcast ins(%sharding_annotated_5 : tensor<64xf32>) outs(%12 : tensor<8x32x64xf32>) dimensions = [0, 1] 
    %13 = arith.addf %11, %broadcasted_24 {dtm.block = 0 : i64, dtm.name = "layer.0.k", dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %cst_25 = arith.constant 0.000000e+00 : f32
    %14 = tensor.empty() : tensor<8x32x64xf32>
    %15 = linalg.fill ins(%cst_25 : f32) outs(%14 : tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %16 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%3, %sharding_annotated_6 : tensor<8x32x64xf32>, tensor<64x64xf32>) outs(%15 : tensor<8x32x64xf32>) attrs =  {dtm.block = 0 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x64xf32>
    %17 = tensor.empty() : tensor<8x32x64xf32>
    %broadcasted_26 = linalg.broadcast ins(%sharding_annotated_7 : tensor<64xf32>) outs(%17 : tensor<8x32x64xf32>) dimensions = [0, 1] 
    %18 = arith.addf %16, %broadcasted_26 {dtm.block = 0 : i64, dtm.name = "layer.0.v", dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %19 = call @dtm.attention.0(%8, %13, %18) {dtm.attr = "{heads = 4, causal = true}", dtm.block = 0 : i64, dtm.stage = 0 : i64} : (tensor<8x32x64xf32>, tensor<8x32x64xf32>, tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %cst_27 = arith.constant 0.000000e+00 : f32
    %20 = tensor.empty() : tensor<8x32x64xf32>
    %21 = linalg.fill ins(%cst_27 : f32) outs(%20 : tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%19, %sharding_annotated_8 : tensor<8x32x64xf32>, tensor<64x64xf32>) outs(%21 : tensor<8x32x64xf32>) attrs =  {dtm.block = 0 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x64xf32>
    %23 = arith.addf %2, %22 {dtm.block = 0 : i64, dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %24 = tensor.empty() : tensor<8x32x64xf32>
    %broadcasted_28 = linalg.broadcast ins(%arg15 : tensor<64xf32>) outs(%24 : tensor<8x32x64xf32>) dimensions = [0, 1] 
    %25 = arith.addf %23, %broadcasted_28 {dtm.block = 0 : i64, dtm.name = "layer.0.x", dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %26 = call @dtm.layernorm.0(%25, %arg16, %arg17) {dtm.attr = "{eps = 1e-05}", dtm.block = 0 : i64, dtm.stage = 0 : i64} : (tensor<8x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %cst_29 = arith.constant 0.000000e+00 : f32
    %27 = tensor.empty() : tensor<8x32x256xf32>
    %28 = linalg.fill ins(%cst_29 : f32) outs(%27 : tensor<8x32x256xf32>) -> tensor<8x32x256xf32>
    %29 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%26, %sharding_annotated_9 : tensor<8x32x64xf32>, tensor<64x256xf32>) outs(%28 : tensor<8x32x256xf32>) attrs =  {dtm.block = 0 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x256xf32>
    %30 = tensor.empty() : tensor<8x32x256xf32>
    %broadcasted_30 = linalg.broadcast ins(%sharding_annotated_10 : tensor<256xf32>) outs(%30 : tensor<8x32x256xf32>) dimensions = [0, 1] 
    %31 = arith.addf %29, %broadcasted_30 {dtm.block = 0 : i64, dtm.stage = 0 : i64} : tensor<8x32x256xf32>
    %32 = call @dtm.gelu.0(%31) {dtm.block = 0 : i64, dtm.name = "layer.0.h", dtm.stage = 0 : i64} : (tensor<8x32x256xf32>) -> tensor<8x32x256xf32>
    %sharding_annotated_31 = mesh.shard %32 to <@mesh, [[1], [], [2]]> : tensor<8x32x256xf32>
    %cst_32 = arith.constant 0.000000e+00 : f32
    %33 = tensor.empty() : tensor<8x32x64xf32>
    %34 = linalg.fill ins(%cst_32 : f32) outs(%33 : tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %35 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%sharding_annotated_31, %sharding_annotated_11 : tensor<8x32x256xf32>, tensor<256x64xf32>) outs(%34 : tensor<8x32x64xf32>) attrs =  {dtm.block = 0 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x64xf32>
    %36 = arith.addf %25, %35 {dtm.block = 0 : i64, dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %37 = tensor.empty() : tensor<8x32x64xf32>
    %broadcasted_33 = linalg.broadcast ins(%arg21 : tensor<64xf32>) outs(%37 : tensor<8x32x64xf32>) dimensions = [0, 1] 
    %38 = arith.addf %36, %broadcasted_33 {dtm.block = 0 : i64, dtm.name = "layer.0.x", dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %39 = call @dtm.layernorm.0(%38, %arg22, %arg23) {dtm.attr = "{eps = 1e-05}", dtm.block = 1 : i64, dtm.name = "layer.1.h", dtm.stage = 0 : i64} : (tensor<8x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %cst_34 = arith.constant 0.000000e+00 : f32
    %40 = tensor.empty() : tensor<8x32x64xf32>
    %41 = linalg.fill ins(%cst_34 : f32) outs(%40 : tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %42 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%39, %sharding_annotated_12 : tensor<8x32x64xf32>, tensor<64x64xf32>) outs(%41 : tensor<8x32x64xf32>) attrs =  {dtm.block = 1 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x64xf32>
    %43 = tensor.empty() : tensor<8x32x64xf32>
    %broadcasted_35 = linalg.broadcast ins(%sharding_annotated_13 : tensor<64xf32>) outs(%43 : tensor<8x32x64xf32>) dimensions = [0, 1] 
    %44 = arith.addf %42, %broadcasted_35 {dtm.block = 1 : i64, dtm.name = "layer.1.q", dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %cst_36 = arith.constant 0.000000e+00 : f32
    %45 = tensor.empty() : tensor<8x32x64xf32>
    %46 = linalg.fill ins(%cst_36 : f32) outs(%45 : tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %47 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%39, %sharding_annotated_14 : tensor<8x32x64xf32>, tensor<64x64xf32>) outs(%46 : tensor<8x32x64xf32>) attrs =  {dtm.block = 1 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x64xf32>
    %48 = tensor.empty() : tensor<8x32x64xf32>
    %broadcasted_37 = linalg.broadcast ins(%sharding_annotated_15 : tensor<64xf32>) outs(%48 : tensor<8x32x64xf32>) dimensions = [0, 1] 
    %49 = arith.addf %47, %broadcasted_37 {dtm.block = 1 : i64, dtm.name = "layer.1.k", dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %cst_38 = arith.constant 0.000000e+00 : f32
    %50 = tensor.empty() : tensor<8x32x64xf32>
    %51 = linalg.fill ins(%cst_38 : f32) outs(%50 : tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %52 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%39, %sharding_annotated_16 : tensor<8x32x64xf32>, tensor<64x64xf32>) outs(%51 : tensor<8x32x64xf32>) attrs =  {dtm.block = 1 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x64xf32>
    %53 = tensor.empty() : tensor<8x32x64xf32>
    %broadcasted_39 = linalg.broadcast ins(%sharding_annotated_17 : tensor<64xf32>) outs(%53 : tensor<8x32x64xf32>) dimensions = [0, 1] 
    %54 = arith.addf %52, %broadcasted_39 {dtm.block = 1 : i64, dtm.name = "layer.1.v", dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %55 = call @dtm.attention.0(%44, %49, %54) {dtm.attr = "{heads = 4, causal = true}", dtm.block = 1 : i64, dtm.stage = 0 : i64} : (tensor<8x32x64xf32>, tensor<8x32x64xf32>, tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %cst_40 = arith.constant 0.000000e+00 : f32
    %56 = tensor.empty() : tensor<8x32x64xf32>
    %57 = linalg.fill ins(%cst_40 : f32) outs(%56 : tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %58 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%55, %sharding_annotated_18 : tensor<8x32x64xf32>, tensor<64x64xf32>) outs(%57 : tensor<8x32x64xf32>) attrs =  {dtm.block = 1 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x64xf32>
    %59 = arith.addf %38, %58 {dtm.block = 1 : i64, dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %60 = tensor.empty() : tensor<8x32x64xf32>
    %broadcasted_41 = linalg.broadcast ins(%arg31 : tensor<64xf32>) outs(%60 : tensor<8x32x64xf32>) dimensions = [0, 1] 
    %61 = arith.addf %59, %broadcasted_41 {dtm.block = 1 : i64, dtm.name = "layer.1.x", dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %62 = call @dtm.layernorm.0(%61, %arg32, %arg33) {dtm.attr = "{eps = 1e-05}", dtm.block = 1 : i64, dtm.stage = 0 : i64} : (tensor<8x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %cst_42 = arith.constant 0.000000e+00 : f32
    %63 = tensor.empty() : tensor<8x32x256xf32>
    %64 = linalg.fill ins(%cst_42 : f32) outs(%63 : tensor<8x32x256xf32>) -> tensor<8x32x256xf32>
    %65 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%62, %sharding_annotated_19 : tensor<8x32x64xf32>, tensor<64x256xf32>) outs(%64 : tensor<8x32x256xf32>) attrs =  {dtm.block = 1 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x256xf32>
    %66 = tensor.empty() : tensor<8x32x256xf32>
    %broadcasted_43 = linalg.broadcast ins(%sharding_annotated_20 : tensor<256xf32>) outs(%66 : tensor<8x32x256xf32>) dimensions = [0, 1] 
    %67 = arith.addf %65, %broadcasted_43 {dtm.block = 1 : i64, dtm.stage = 0 : i64} : tensor<8x32x256xf32>
    %68 = call @dtm.gelu.0(%67) {dtm.block = 1 : i64, dtm.name = "layer.1.h", dtm.stage = 0 : i64} : (tensor<8x32x256xf32>) -> tensor<8x32x256xf32>
    %sharding_annotated_44 = mesh.shard %68 to <@mesh, [[1], [], [2]]> : tensor<8x32x256xf32>
    %cst_45 = arith.constant 0.000000e+00 : f32
    %69 = tensor.empty() : tensor<8x32x64xf32>
    %70 = linalg.fill ins(%cst_45 : f32) outs(%69 : tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %71 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%sharding_annotated_44, %sharding_annotated_21 : tensor<8x32x256xf32>, tensor<256x64xf32>) outs(%70 : tensor<8x32x64xf32>) attrs =  {dtm.block = 1 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x64xf32>
    %72 = arith.addf %61, %71 {dtm.block = 1 : i64, dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %73 = tensor.empty() : tensor<8x32x64xf32>
    %broadcasted_46 = linalg.broadcast ins(%arg37 : tensor<64xf32>) outs(%73 : tensor<8x32x64xf32>) dimensions = [0, 1] 
    %74 = arith.addf %72, %broadcasted_46 {dtm.block = 1 : i64, dtm.name = "layer.1.x", dtm.stage = 0 : i64} : tensor<8x32x64xf32>
    %75 = call @dtm.layernorm.0(%74, %arg4, %arg5) {dtm.attr = "{eps = 1e-05}"} : (tensor<8x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %76 = tensor.empty() : tensor<64x256xf32>
    %transposed = linalg.transpose ins(%sharding_annotated_1 : tensor<256x64xf32>) outs(%76 : tensor<64x256xf32>) permutation = [1, 0] 
    %cst_47 = arith.constant 0.000000e+00 : f32
    %77 = tensor.empty() : tensor<8x32x256xf32>
    %78 = linalg.fill ins(%cst_47 : f32) outs(%77 : tensor<8x32x256xf32>) -> tensor<8x32x256xf32>
    %79 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%75, %transposed : tensor<8x32x64xf32>, tensor<64x256xf32>) outs(%78 : tensor<8x32x256xf32>) attrs =  {dtm.name = "logits"} {
    ^bb0(%in: f32, %in_48: f32, %out: f32):
      %81 = arith.mulf %in, %in_48 : f32
      %82 = arith.addf %out, %81 : f32
      linalg.yield %82 : f32
    } -> tensor<8x32x256xf32>
    %80 = call @dtm.cross_entropy.0(%79, %sharding_annotated_0) {dtm.name = "loss"} : (tensor<8x32x256xf32>, tensor<8x32xi32>) -> tensor<f32>
    return %80 : tensor<f32>
  }
}
