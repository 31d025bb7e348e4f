// a function returning two values: dtm trains the one that returns its loss
module {
  func.func @forward(%x: tensor<4x8xf32> {dtm.role = "input"}, %w: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
    %y = arith.mulf %x, %w : tensor<4x8xf32>
    return %y, %y : tensor<4x8xf32>, tensor<4x8xf32>
  }
}
