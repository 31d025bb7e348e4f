module attributes {dtm.mesh_axes = ["dp", "tp"], dtm.model = "mlp", dtm.train = "train optimizer = \22sgd\22, lr = 0.05, beta1 = 0.9, beta2 = 0.999, eps = 1e-08, weight_decay = 0, clip = 0, momentum = 0.9, nesterov = false\0Atrain lr_schedule = \22constant\22, warmup = 0, min_lr = 0\0Atrain zero = 0, zero_axes = (dp), reshard_after_forward = true\0Atrain microbatches = 1, schedule = \221f1b\22, virtual_stages = 1, precision = f32, reduce_dtype = f32, master_dtype = f32\0Atrain steps = 200, data = \22synthetic\22, seed = 0\0Atrain sequence_parallel = false, recompute = false, uneven_shards = false, bucket_bytes = 26214400, prefetch = 1\0A"} {
  mesh.mesh @mesh(shape = 2x2)
  func.func private @dtm.gelu.0(tensor<16x64xf32>) -> tensor<16x64xf32>
  func.func private @dtm.mse.0(tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<f32>
  func.func @forward(%arg0: tensor<16x32xf32> {dtm.name = "x", dtm.role = "input"}, %arg1: tensor<16x8xf32> {dtm.name = "y", dtm.role = "input"}, %arg2: tensor<32x64xf32> {dtm.attr = "{init = normal(0, 0.1)}", dtm.name = "w1", dtm.role = "param"}, %arg3: tensor<64xf32> {dtm.attr = "{init = zeros}", dtm.name = "b1", dtm.role = "param"}, %arg4: tensor<64x8xf32> {dtm.attr = "{init = normal(0, 0.1)}", dtm.name = "w2", dtm.role = "param"}, %arg5: tensor<8xf32> {dtm.attr = "{init = zeros}", dtm.name = "b2", dtm.role = "param"}) -> tensor<f32> {
    %sharding_annotated = mesh.shard %arg0 to <@mesh, [[0]]> : tensor<16x32xf32>
    %sharding_annotated_0 = mesh.shard %arg1 to <@mesh, [[0]]> : tensor<16x8xf32>
    %sharding_annotated_1 = mesh.shard %arg2 to <@mesh, [[], [1]]> : tensor<32x64xf32>
    %sharding_annotated_2 = mesh.shard %arg3 to <@mesh, [[1]]> : tensor<64xf32>
    %sharding_annotated_3 = mesh.shard %arg4 to <@mesh, [[1]]> : tensor<64x8xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<16x64xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<16x64xf32>) -> tensor<16x64xf32>
    %2 = linalg.matmul ins(%sharding_annotated, %sharding_annotated_1 : tensor<16x32xf32>, tensor<32x64xf32>) outs(%1 : tensor<16x64xf32>) -> tensor<16x64xf32>
    %3 = tensor.empty() : tensor<16x64xf32>
    %broadcasted = linalg.broadcast ins(%sharding_annotated_2 : tensor<64xf32>) outs(%3 : tensor<16x64xf32>) dimensions = [0] 
    %4 = arith.addf %2, %broadcasted : tensor<16x64xf32>
    %5 = call @dtm.gelu.0(%4) {dtm.name = "h"} : (tensor<16x64xf32>) -> tensor<16x64xf32>
    %sharding_annotated_4 = mesh.shard %5 to <@mesh, [[0], [1]]> : tensor<16x64xf32>
    %cst_5 = arith.constant 0.000000e+00 : f32
    %6 = tensor.empty() : tensor<16x8xf32>
    %7 = linalg.fill ins(%cst_5 : f32) outs(%6 : tensor<16x8xf32>) -> tensor<16x8xf32>
    %8 = linalg.matmul ins(%sharding_annotated_4, %sharding_annotated_3 : tensor<16x64xf32>, tensor<64x8xf32>) outs(%7 : tensor<16x8xf32>) -> tensor<16x8xf32>
    %9 = tensor.empty() : tensor<16x8xf32>
    %broadcasted_6 = linalg.broadcast ins(%arg5 : tensor<8xf32>) outs(%9 : tensor<16x8xf32>) dimensions = [0] 
    %10 = arith.addf %8, %broadcasted_6 : tensor<16x8xf32>
    %11 = call @dtm.mse.0(%10, %sharding_annotated_0) {dtm.name = "loss"} : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<f32>
    return %11 : tensor<f32>
  }
}
