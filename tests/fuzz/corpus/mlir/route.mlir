#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
module attributes {dtm.mesh_axes = ["dp", "ep"], dtm.model = "route", dtm.train = "train optimizer = \22adamw\22, lr = 0.0003, beta1 = 0.9, beta2 = 0.999, eps = 1e-08, weight_decay = 0, clip = 0, momentum = 0, nesterov = false\0Atrain lr_schedule = \22constant\22, warmup = 0, min_lr = 0\0Atrain zero = 0, zero_axes = (dp), reshard_after_forward = true\0Atrain microbatches = 1, schedule = \221f1b\22, virtual_stages = 1, precision = f32, reduce_dtype = f32, master_dtype = f32\0Atrain steps = 100, data = \22synthetic\22, seed = 0\0Atrain sequence_parallel = false, recompute = false, uneven_shards = false, bucket_bytes = 26214400, prefetch = 1\0A"} {
  mesh.mesh @mesh(shape = 1x1)
  func.func private @dtm.topk.0(tensor<2x4x4xf32>) -> tensor<2x4x2xi32>
  func.func private @dtm.gather.0(tensor<2x4x4xf32>, tensor<2x4x2xi32>) -> tensor<2x4x2xf32>
  func.func private @dtm.moe_slot.0(tensor<2x4x2xi32>) -> tensor<2x4x2xi32>
  func.func private @dtm.moe_token.0(tensor<2x4x2xi32>) -> tensor<2x12xi32>
  func.func private @dtm.gather.1(tensor<2x4x8xf32>, tensor<2x12xi32>) -> tensor<2x12x8xf32>
  func.func private @dtm.gather.2(tensor<2x12x8xf32>, tensor<2x8xi32>) -> tensor<2x8x8xf32>
  func.func private @dtm.scatter_add.0(tensor<2x8x8xf32>, tensor<2x8xi32>) -> tensor<2x4x8xf32>
  func.func private @dtm.one_hot.0(tensor<2x4x2xi32>) -> tensor<2x4x2x4xf32>
  func.func @forward(%arg0: tensor<2x4x8xf32> {dtm.name = "x", dtm.role = "input"}, %arg1: tensor<8x4xf32> {dtm.attr = "{init = normal(0, 1)}", dtm.name = "r", dtm.role = "param"}, %arg2: tensor<4x8x8xf32> {dtm.attr = "{init = normal(0, 0.1)}", dtm.name = "w", dtm.role = "param"}) -> tensor<f32> {
    %sharding_annotated = mesh.shard %arg0 to <@mesh, [[0, 1]]> : tensor<2x4x8xf32>
    %sharding_annotated_0 = mesh.shard %arg2 to <@mesh, [[1]]> : tensor<4x8x8xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<2x4x4xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%sharding_annotated, %arg1 : tensor<2x4x8xf32>, tensor<8x4xf32>) outs(%1 : tensor<2x4x4xf32>) {
    ^bb0(%in: f32, %in_21: f32, %out: f32):
      %27 = arith.mulf %in, %in_21 : f32
      %28 = arith.addf %out, %27 : f32
      linalg.yield %28 : f32
    } -> tensor<2x4x4xf32>
    %3 = tensor.empty() : tensor<2x4x4xf32>
    %4 = linalg.softmax {dtm.name = "p"} dimension(2) ins(%2 : tensor<2x4x4xf32>) outs(%3 : tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %5 = call @dtm.topk.0(%4) {dtm.attr = "{k = 2, n = 0, capacity = 0}", dtm.name = "i"} : (tensor<2x4x4xf32>) -> tensor<2x4x2xi32>
    %6 = call @dtm.gather.0(%4, %5) {dtm.name = "g"} : (tensor<2x4x4xf32>, tensor<2x4x2xi32>) -> tensor<2x4x2xf32>
    %7 = call @dtm.moe_slot.0(%5) {dtm.attr = "{k = 0, n = 4, capacity = 3, stats = 1}", dtm.name = "s"} : (tensor<2x4x2xi32>) -> tensor<2x4x2xi32>
    %8 = call @dtm.moe_token.0(%5) {dtm.attr = "{k = 0, n = 4, capacity = 3}"} : (tensor<2x4x2xi32>) -> tensor<2x12xi32>
    %9 = call @dtm.gather.1(%sharding_annotated, %8) : (tensor<2x4x8xf32>, tensor<2x12xi32>) -> tensor<2x12x8xf32>
    %cst_1 = arith.constant dense<[2, 4, 3, 8]> : tensor<4xi64>
    %reshape = tensor.reshape %9(%cst_1) {dtm.name = "xd"} : (tensor<2x12x8xf32>, tensor<4xi64>) -> tensor<2x4x3x8xf32>
    %10 = tensor.empty() : tensor<4x2x3x8xf32>
    %transposed = linalg.transpose ins(%reshape : tensor<2x4x3x8xf32>) outs(%10 : tensor<4x2x3x8xf32>) permutation = [1, 0, 2, 3]  {dtm.name = "ye"}
    %sharding_annotated_2 = mesh.shard %transposed to <@mesh, [[1], [0]]> : tensor<4x2x3x8xf32>
    %cst_3 = arith.constant dense<[4, 6, 8]> : tensor<3xi64>
    %reshape_4 = tensor.reshape %sharding_annotated_2(%cst_3) : (tensor<4x2x3x8xf32>, tensor<3xi64>) -> tensor<4x6x8xf32>
    %cst_5 = arith.constant 0.000000e+00 : f32
    %11 = tensor.empty() : tensor<4x6x8xf32>
    %12 = linalg.fill ins(%cst_5 : f32) outs(%11 : tensor<4x6x8xf32>) -> tensor<4x6x8xf32>
    %13 = linalg.generic {indexing_maps = [#map, #map3, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%reshape_4, %sharding_annotated_0 : tensor<4x6x8xf32>, tensor<4x8x8xf32>) outs(%12 : tensor<4x6x8xf32>) {
    ^bb0(%in: f32, %in_21: f32, %out: f32):
      %27 = arith.mulf %in, %in_21 : f32
      %28 = arith.addf %out, %27 : f32
      linalg.yield %28 : f32
    } -> tensor<4x6x8xf32>
    %cst_6 = arith.constant dense<[4, 2, 3, 8]> : tensor<4xi64>
    %reshape_7 = tensor.reshape %13(%cst_6) : (tensor<4x6x8xf32>, tensor<4xi64>) -> tensor<4x2x3x8xf32>
    %14 = tensor.empty() : tensor<2x4x3x8xf32>
    %transposed_8 = linalg.transpose ins(%reshape_7 : tensor<4x2x3x8xf32>) outs(%14 : tensor<2x4x3x8xf32>) permutation = [1, 0, 2, 3] 
    %cst_9 = arith.constant dense<[2, 12, 8]> : tensor<3xi64>
    %reshape_10 = tensor.reshape %transposed_8(%cst_9) {dtm.name = "y"} : (tensor<2x4x3x8xf32>, tensor<3xi64>) -> tensor<2x12x8xf32>
    %cst_11 = arith.constant dense<[2, 8]> : tensor<2xi64>
    %reshape_12 = tensor.reshape %7(%cst_11) : (tensor<2x4x2xi32>, tensor<2xi64>) -> tensor<2x8xi32>
    %15 = call @dtm.gather.2(%reshape_10, %reshape_12) : (tensor<2x12x8xf32>, tensor<2x8xi32>) -> tensor<2x8x8xf32>
    %cst_13 = arith.constant dense<[2, 8]> : tensor<2xi64>
    %reshape_14 = tensor.reshape %5(%cst_13) : (tensor<2x4x2xi32>, tensor<2xi64>) -> tensor<2x8xi32>
    %16 = call @dtm.scatter_add.0(%15, %reshape_14) {dtm.name = "z"} : (tensor<2x8x8xf32>, tensor<2x8xi32>) -> tensor<2x4x8xf32>
    %cst_15 = arith.constant 0.000000e+00 : f32
    %17 = tensor.empty() : tensor<f32>
    %18 = linalg.fill ins(%cst_15 : f32) outs(%17 : tensor<f32>) -> tensor<f32>
    %reduced = linalg.reduce ins(%16 : tensor<2x4x8xf32>) outs(%18 : tensor<f32>) dimensions = [0, 1, 2] 
      (%in: f32, %init: f32) {
        %27 = arith.addf %in, %init : f32
        linalg.yield %27 : f32
      }
    %cst_16 = arith.constant 0.000000e+00 : f32
    %19 = tensor.empty() : tensor<f32>
    %20 = linalg.fill ins(%cst_16 : f32) outs(%19 : tensor<f32>) -> tensor<f32>
    %reduced_17 = linalg.reduce ins(%6 : tensor<2x4x2xf32>) outs(%20 : tensor<f32>) dimensions = [0, 1, 2] 
      (%in: f32, %init: f32) {
        %27 = arith.addf %in, %init : f32
        linalg.yield %27 : f32
      }
    %21 = arith.addf %reduced, %reduced_17 : tensor<f32>
    %22 = call @dtm.one_hot.0(%5) {dtm.attr = "{k = 0, n = 4, capacity = 0}"} : (tensor<2x4x2xi32>) -> tensor<2x4x2x4xf32>
    %cst_18 = arith.constant 0.000000e+00 : f32
    %23 = tensor.empty() : tensor<f32>
    %24 = linalg.fill ins(%cst_18 : f32) outs(%23 : tensor<f32>) -> tensor<f32>
    %reduced_19 = linalg.reduce ins(%22 : tensor<2x4x2x4xf32>) outs(%24 : tensor<f32>) dimensions = [0, 1, 2, 3] 
      (%in: f32, %init: f32) {
        %27 = arith.addf %in, %init : f32
        linalg.yield %27 : f32
      }
    %cst_20 = arith.constant dense<1.562500e-02> : tensor<f32>
    %25 = arith.mulf %reduced_19, %cst_20 : tensor<f32>
    %26 = arith.addf %21, %25 {dtm.name = "loss"} : tensor<f32>
    return %26 : tensor<f32>
  }
}
