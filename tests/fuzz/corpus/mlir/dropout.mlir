#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
module attributes {dtm.mesh_axes = ["pp", "dp", "tp"], dtm.model = "gptdrop", dtm.train = "train optimizer = \22adamw\22, lr = 0.001, beta1 = 0.9, beta2 = 0.95, eps = 1e-08, weight_decay = 0.1, clip = 1, momentum = 0, nesterov = false\0Atrain lr_schedule = \22constant\22, warmup = 0, min_lr = 0\0Atrain zero = 0, zero_axes = (dp), reshard_after_forward = true\0Atrain microbatches = 1, schedule = \221f1b\22, virtual_stages = 1, precision = f32, reduce_dtype = f32, master_dtype = f32\0Atrain steps = 10, data = \22synthetic\22, seed = 0\0Atrain sequence_parallel = false, recompute = false, uneven_shards = false, bucket_bytes = 26214400, prefetch = 1\0A"} {
  mesh.mesh @mesh(shape = 1x1x1)
  func.func private @dtm.embed.0(tensor<64x32xf32>, tensor<12x16xi32>) -> tensor<12x16x32xf32>
  func.func private @dtm.dropout.0(tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
  func.func private @dtm.layernorm.0(tensor<12x16x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<12x16x32xf32>
  func.func private @dtm.attention.0(tensor<12x16x32xf32>, tensor<12x16x32xf32>, tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
  func.func private @dtm.gelu.0(tensor<12x16x128xf32>) -> tensor<12x16x128xf32>
  func.func private @dtm.dropout.1(tensor<12x16x128xf32>) -> tensor<12x16x128xf32>
  func.func private @dtm.cross_entropy.0(tensor<12x16x64xf32>, tensor<12x16xi32>) -> tensor<f32>
  func.func @forward(%arg0: tensor<12x16xi32> {dtm.name = "tokens", dtm.role = "input"}, %arg1: tensor<12x16xi32> {dtm.name = "targets", dtm.role = "input"}, %arg2: tensor<64x32xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.name = "wte", dtm.role = "param"}, %arg3: tensor<16x32xf32> {dtm.attr = "{init = normal(0, 0.01)}", dtm.name = "wpe", dtm.role = "param"}, %arg4: tensor<32xf32> {dtm.attr = "{init = ones}", dtm.name = "lnf", dtm.role = "param"}, %arg5: tensor<32xf32> {dtm.attr = "{init = zeros}", dtm.name = "lnfb", dtm.role = "param"}, %arg6: tensor<32xf32> {dtm.attr = "{init = ones}", dtm.block = 0 : i64, dtm.name = "layer.0.ln1", dtm.role = "param", dtm.stage = 0 : i64}, %arg7: tensor<32xf32> {dtm.attr = "{init = zeros}", dtm.block = 0 : i64, dtm.name = "layer.0.ln1b", dtm.role = "param", dtm.stage = 0 : i64}, %arg8: tensor<32x96xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 0 : i64, dtm.name = "layer.0.wqkv", dtm.role = "param", dtm.stage = 0 : i64}, %arg9: tensor<32x32xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 0 : i64, dtm.name = "layer.0.wo", dtm.role = "param", dtm.stage = 0 : i64}, %arg10: tensor<32xf32> {dtm.attr = "{init = ones}", dtm.block = 0 : i64, dtm.name = "layer.0.ln2", dtm.role = "param", dtm.stage = 0 : i64}, %arg11: tensor<32xf32> {dtm.attr = "{init = zeros}", dtm.block = 0 : i64, dtm.name = "layer.0.ln2b", dtm.role = "param", dtm.stage = 0 : i64}, %arg12: tensor<32x128xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 0 : i64, dtm.name = "layer.0.wfc", dtm.role = "param", dtm.stage = 0 : i64}, %arg13: tensor<128x32xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 0 : i64, dtm.name = "layer.0.wproj", dtm.role = "param", dtm.stage = 0 : i64}, %arg14: tensor<32xf32> {dtm.attr = "{init = ones}", dtm.block = 1 : i64, dtm.name = "layer.1.ln1", dtm.role = "param", dtm.stage = 0 : i64}, %arg15: tensor<32xf32> {dtm.attr = "{init = zeros}", dtm.block = 1 : i64, dtm.name = "layer.1.ln1b", dtm.role = "param", dtm.stage = 0 : i64}, %arg16: tensor<32x96xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 1 : i64, dtm.name = "layer.1.wqkv", dtm.role = "param", dtm.stage = 0 : i64}, %arg17: tensor<32x32xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 1 : i64, dtm.name = "layer.1.wo", dtm.role = "param", dtm.stage = 0 : i64}, %arg18: tensor<32xf32> {dtm.attr = "{init = ones}", dtm.block = 1 : i64, dtm.name = "layer.1.ln2", dtm.role = "param", dtm.stage = 0 : i64}, %arg19: tensor<32xf32> {dtm.attr = "{init = zeros}", dtm.block = 1 : i64, dtm.name = "layer.1.ln2b", dtm.role = "param", dtm.stage = 0 : i64}, %arg20: tensor<32x128xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 1 : i64, dtm.name = "layer.1.wfc", dtm.role = "param", dtm.stage = 0 : i64}, %arg21: tensor<128x32xf32> {dtm.attr = "{init = normal(0, 0.02)}", dtm.block = 1 : i64, dtm.name = "layer.1.wproj", dtm.role = "param", dtm.stage = 0 : i64}) -> tensor<f32> {
    %sharding_annotated = mesh.shard %arg0 to <@mesh, [[1]]> : tensor<12x16xi32>
    %sharding_annotated_0 = mesh.shard %arg1 to <@mesh, [[1]]> : tensor<12x16xi32>
    %sharding_annotated_1 = mesh.shard %arg2 to <@mesh, [[2]]> : tensor<64x32xf32>
    %sharding_annotated_2 = mesh.shard %arg8 to <@mesh, [[], [2]]> : tensor<32x96xf32>
    %sharding_annotated_3 = mesh.shard %arg9 to <@mesh, [[2]]> : tensor<32x32xf32>
    %sharding_annotated_4 = mesh.shard %arg12 to <@mesh, [[], [2]]> : tensor<32x128xf32>
    %sharding_annotated_5 = mesh.shard %arg13 to <@mesh, [[2]]> : tensor<128x32xf32>
    %sharding_annotated_6 = mesh.shard %arg16 to <@mesh, [[], [2]]> : tensor<32x96xf32>
    %sharding_annotated_7 = mesh.shard %arg17 to <@mesh, [[2]]> : tensor<32x32xf32>
    %sharding_annotated_8 = mesh.shard %arg20 to <@mesh, [[], [2]]> : tensor<32x128xf32>
    %sharding_annotated_9 = mesh.shard %arg21 to <@mesh, [[2]]> : tensor<128x32xf32>
    %0 = call @dtm.embed.0(%sharding_annotated_1, %sharding_annotated) : (tensor<64x32xf32>, tensor<12x16xi32>) -> tensor<12x16x32xf32>
    %1 = tensor.empty() : tensor<12x16x32xf32>
    %broadcasted = linalg.broadcast ins(%arg3 : tensor<16x32xf32>) outs(%1 : tensor<12x16x32xf32>) dimensions = [0] 
    %2 = arith.addf %0, %broadcasted {dtm.name = "x"} : tensor<12x16x32xf32>
    %3 = call @dtm.dropout.0(%2) {dtm.attr = "{rate = 0.1, salt = 0}", dtm.name = "x"} : (tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
    %4 = call @dtm.layernorm.0(%3, %arg6, %arg7) {dtm.attr = "{eps = 1e-05}", dtm.block = 0 : i64, dtm.stage = 0 : i64} : (tensor<12x16x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<12x16x32xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %5 = tensor.empty() : tensor<12x16x96xf32>
    %6 = linalg.fill ins(%cst : f32) outs(%5 : tensor<12x16x96xf32>) -> tensor<12x16x96xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%4, %sharding_annotated_2 : tensor<12x16x32xf32>, tensor<32x96xf32>) outs(%6 : tensor<12x16x96xf32>) attrs =  {dtm.block = 0 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %52 = arith.mulf %in, %in_23 : f32
      %53 = arith.addf %out, %52 : f32
      linalg.yield %53 : f32
    } -> tensor<12x16x96xf32>
    %extracted_slice = tensor.extract_slice %7[0, 0, 0] [12, 16, 32] [1, 1, 1] {dtm.block = 0 : i64, dtm.stage = 0 : i64} : tensor<12x16x96xf32> to tensor<12x16x32xf32>
    %extracted_slice_10 = tensor.extract_slice %7[0, 0, 32] [12, 16, 32] [1, 1, 1] {dtm.block = 0 : i64, dtm.stage = 0 : i64} : tensor<12x16x96xf32> to tensor<12x16x32xf32>
    %extracted_slice_11 = tensor.extract_slice %7[0, 0, 64] [12, 16, 32] [1, 1, 1] {dtm.block = 0 : i64, dtm.stage = 0 : i64} : tensor<12x16x96xf32> to tensor<12x16x32xf32>
    %8 = call @dtm.attention.0(%extracted_slice, %extracted_slice_10, %extracted_slice_11) {dtm.attr = "{heads = 4, causal = true}", dtm.block = 0 : i64, dtm.stage = 0 : i64} : (tensor<12x16x32xf32>, tensor<12x16x32xf32>, tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
    %cst_12 = arith.constant 0.000000e+00 : f32
    %9 = tensor.empty() : tensor<12x16x32xf32>
    %10 = linalg.fill ins(%cst_12 : f32) outs(%9 : tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%8, %sharding_annotated_3 : tensor<12x16x32xf32>, tensor<32x32xf32>) outs(%10 : tensor<12x16x32xf32>) attrs =  {dtm.block = 0 : i64, dtm.name = "layer.0.a", dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %52 = arith.mulf %in, %in_23 : f32
      %53 = arith.addf %out, %52 : f32
      linalg.yield %53 : f32
    } -> tensor<12x16x32xf32>
    %12 = call @dtm.dropout.0(%11) {dtm.attr = "{rate = 0.1, salt = 1}", dtm.block = 0 : i64, dtm.name = "layer.0.a", dtm.stage = 0 : i64} : (tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
    %13 = arith.addf %3, %12 {dtm.block = 0 : i64, dtm.name = "layer.0.x", dtm.stage = 0 : i64} : tensor<12x16x32xf32>
    %14 = call @dtm.layernorm.0(%13, %arg10, %arg11) {dtm.attr = "{eps = 1e-05}", dtm.block = 0 : i64, dtm.stage = 0 : i64} : (tensor<12x16x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<12x16x32xf32>
    %cst_13 = arith.constant 0.000000e+00 : f32
    %15 = tensor.empty() : tensor<12x16x128xf32>
    %16 = linalg.fill ins(%cst_13 : f32) outs(%15 : tensor<12x16x128xf32>) -> tensor<12x16x128xf32>
    %17 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%14, %sharding_annotated_4 : tensor<12x16x32xf32>, tensor<32x128xf32>) outs(%16 : tensor<12x16x128xf32>) attrs =  {dtm.block = 0 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %52 = arith.mulf %in, %in_23 : f32
      %53 = arith.addf %out, %52 : f32
      linalg.yield %53 : f32
    } -> tensor<12x16x128xf32>
    %18 = call @dtm.gelu.0(%17) {dtm.block = 0 : i64, dtm.name = "layer.0.h", dtm.stage = 0 : i64} : (tensor<12x16x128xf32>) -> tensor<12x16x128xf32>
    %19 = call @dtm.dropout.1(%18) {dtm.attr = "{rate = 0.1, salt = 2}", dtm.block = 0 : i64, dtm.name = "layer.0.h", dtm.stage = 0 : i64} : (tensor<12x16x128xf32>) -> tensor<12x16x128xf32>
    %cst_14 = arith.constant 0.000000e+00 : f32
    %20 = tensor.empty() : tensor<12x16x32xf32>
    %21 = linalg.fill ins(%cst_14 : f32) outs(%20 : tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%19, %sharding_annotated_5 : tensor<12x16x128xf32>, tensor<128x32xf32>) outs(%21 : tensor<12x16x32xf32>) attrs =  {dtm.block = 0 : i64, dtm.name = "layer.0.h", dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %52 = arith.mulf %in, %in_23 : f32
      %53 = arith.addf %out, %52 : f32
      linalg.yield %53 : f32
    } -> tensor<12x16x32xf32>
    %23 = call @dtm.dropout.0(%22) {dtm.attr = "{rate = 0.1, salt = 3}", dtm.block = 0 : i64, dtm.name = "layer.0.h", dtm.stage = 0 : i64} : (tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
    %24 = arith.addf %13, %23 {dtm.block = 0 : i64, dtm.name = "layer.0.x", dtm.stage = 0 : i64} : tensor<12x16x32xf32>
    %25 = call @dtm.layernorm.0(%24, %arg14, %arg15) {dtm.attr = "{eps = 1e-05}", dtm.block = 1 : i64, dtm.stage = 0 : i64} : (tensor<12x16x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<12x16x32xf32>
    %cst_15 = arith.constant 0.000000e+00 : f32
    %26 = tensor.empty() : tensor<12x16x96xf32>
    %27 = linalg.fill ins(%cst_15 : f32) outs(%26 : tensor<12x16x96xf32>) -> tensor<12x16x96xf32>
    %28 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%25, %sharding_annotated_6 : tensor<12x16x32xf32>, tensor<32x96xf32>) outs(%27 : tensor<12x16x96xf32>) attrs =  {dtm.block = 1 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %52 = arith.mulf %in, %in_23 : f32
      %53 = arith.addf %out, %52 : f32
      linalg.yield %53 : f32
    } -> tensor<12x16x96xf32>
    %extracted_slice_16 = tensor.extract_slice %28[0, 0, 0] [12, 16, 32] [1, 1, 1] {dtm.block = 1 : i64, dtm.stage = 0 : i64} : tensor<12x16x96xf32> to tensor<12x16x32xf32>
    %extracted_slice_17 = tensor.extract_slice %28[0, 0, 32] [12, 16, 32] [1, 1, 1] {dtm.block = 1 : i64, dtm.stage = 0 : i64} : tensor<12x16x96xf32> to tensor<12x16x32xf32>
    %extracted_slice_18 = tensor.extract_slice %28[0, 0, 64] [12, 16, 32] [1, 1, 1] {dtm.block = 1 : i64, dtm.stage = 0 : i64} : tensor<12x16x96xf32> to tensor<12x16x32xf32>
    %29 = call @dtm.attention.0(%extracted_slice_16, %extracted_slice_17, %extracted_slice_18) {dtm.attr = "{heads = 4, causal = true}", dtm.block = 1 : i64, dtm.stage = 0 : i64} : (tensor<12x16x32xf32>, tensor<12x16x32xf32>, tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
    %cst_19 = arith.constant 0.000000e+00 : f32
    %30 = tensor.empty() : tensor<12x16x32xf32>
    %31 = linalg.fill ins(%cst_19 : f32) outs(%30 : tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
    %32 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%29, %sharding_annotated_7 : tensor<12x16x32xf32>, tensor<32x32xf32>) outs(%31 : tensor<12x16x32xf32>) attrs =  {dtm.block = 1 : i64, dtm.name = "layer.1.a", dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %52 = arith.mulf %in, %in_23 : f32
      %53 = arith.addf %out, %52 : f32
      linalg.yield %53 : f32
    } -> tensor<12x16x32xf32>
    %33 = call @dtm.dropout.0(%32) {dtm.attr = "{rate = 0.1, salt = 4}", dtm.block = 1 : i64, dtm.name = "layer.1.a", dtm.stage = 0 : i64} : (tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
    %34 = arith.addf %24, %33 {dtm.block = 1 : i64, dtm.name = "layer.1.x", dtm.stage = 0 : i64} : tensor<12x16x32xf32>
    %35 = call @dtm.layernorm.0(%34, %arg18, %arg19) {dtm.attr = "{eps = 1e-05}", dtm.block = 1 : i64, dtm.stage = 0 : i64} : (tensor<12x16x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<12x16x32xf32>
    %cst_20 = arith.constant 0.000000e+00 : f32
    %36 = tensor.empty() : tensor<12x16x128xf32>
    %37 = linalg.fill ins(%cst_20 : f32) outs(%36 : tensor<12x16x128xf32>) -> tensor<12x16x128xf32>
    %38 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%35, %sharding_annotated_8 : tensor<12x16x32xf32>, tensor<32x128xf32>) outs(%37 : tensor<12x16x128xf32>) attrs =  {dtm.block = 1 : i64, dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %52 = arith.mulf %in, %in_23 : f32
      %53 = arith.addf %out, %52 : f32
      linalg.yield %53 : f32
    } -> tensor<12x16x128xf32>
    %39 = call @dtm.gelu.0(%38) {dtm.block = 1 : i64, dtm.name = "layer.1.h", dtm.stage = 0 : i64} : (tensor<12x16x128xf32>) -> tensor<12x16x128xf32>
    %40 = call @dtm.dropout.1(%39) {dtm.attr = "{rate = 0.1, salt = 5}", dtm.block = 1 : i64, dtm.name = "layer.1.h", dtm.stage = 0 : i64} : (tensor<12x16x128xf32>) -> tensor<12x16x128xf32>
    %cst_21 = arith.constant 0.000000e+00 : f32
    %41 = tensor.empty() : tensor<12x16x32xf32>
    %42 = linalg.fill ins(%cst_21 : f32) outs(%41 : tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
    %43 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%40, %sharding_annotated_9 : tensor<12x16x128xf32>, tensor<128x32xf32>) outs(%42 : tensor<12x16x32xf32>) attrs =  {dtm.block = 1 : i64, dtm.name = "layer.1.h", dtm.stage = 0 : i64} {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %52 = arith.mulf %in, %in_23 : f32
      %53 = arith.addf %out, %52 : f32
      linalg.yield %53 : f32
    } -> tensor<12x16x32xf32>
    %44 = call @dtm.dropout.0(%43) {dtm.attr = "{rate = 0.1, salt = 6}", dtm.block = 1 : i64, dtm.name = "layer.1.h", dtm.stage = 0 : i64} : (tensor<12x16x32xf32>) -> tensor<12x16x32xf32>
    %45 = arith.addf %34, %44 {dtm.block = 1 : i64, dtm.name = "layer.1.x", dtm.stage = 0 : i64} : tensor<12x16x32xf32>
    %46 = call @dtm.layernorm.0(%45, %arg4, %arg5) {dtm.attr = "{eps = 1e-05}"} : (tensor<12x16x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<12x16x32xf32>
    %47 = tensor.empty() : tensor<32x64xf32>
    %transposed = linalg.transpose ins(%sharding_annotated_1 : tensor<64x32xf32>) outs(%47 : tensor<32x64xf32>) permutation = [1, 0] 
    %cst_22 = arith.constant 0.000000e+00 : f32
    %48 = tensor.empty() : tensor<12x16x64xf32>
    %49 = linalg.fill ins(%cst_22 : f32) outs(%48 : tensor<12x16x64xf32>) -> tensor<12x16x64xf32>
    %50 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%46, %transposed : tensor<12x16x32xf32>, tensor<32x64xf32>) outs(%49 : tensor<12x16x64xf32>) attrs =  {dtm.name = "logits"} {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %52 = arith.mulf %in, %in_23 : f32
      %53 = arith.addf %out, %52 : f32
      linalg.yield %53 : f32
    } -> tensor<12x16x64xf32>
    %51 = call @dtm.cross_entropy.0(%50, %sharding_annotated_0) {dtm.name = "loss"} : (tensor<12x16x64xf32>, tensor<12x16xi32>) -> tensor<f32>
    return %51 : tensor<f32>
  }
}
